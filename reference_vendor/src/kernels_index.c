/*
 * kernels_index.c -- data movement by index: gather, scatter (src / value /
 * add, out-of-place and in-place), index_select, index.Tensor (advanced
 * indexing with long/int index tensors and bool/uint8 masks),
 * _index_put_impl_ (assign or accumulate), embedding_dense_backward, flip
 * and roll.
 *
 * Each op walks the multi-indices of one iteration space (the index tensor,
 * or the output) and maps them to a source and a destination element, with
 * bounds checks that fail the kernel with the offending index.  Copies move
 * raw elements (the runtime gives both sides the same dtype); accumulation
 * goes through float64 (floats) or int64 (integers).
 */
#include "kernel_util.h"

/* advance idx (row-major) over sizes; 0 when wrapped around */
static int next_index(int64_t *idx, const int64_t *sizes, int ndim) {
    for (int d = ndim - 1; d >= 0; --d) {
        if (++idx[d] < sizes[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

static int64_t numel_of(const int64_t *sizes, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d)
        n *= sizes[d];
    return n;
}

static int64_t load_index(const fl_tensor *t, const int64_t *idx) {
    return ref_load_i64(ref_elem_ptr(t, idx), t->dtype);
}

/* wrap a possibly negative index against size; -1 when out of range */
static int64_t wrap_index(int64_t v, int64_t size) {
    if (v < -size || v >= size)
        return -1;
    return v < 0 ? v + size : v;
}

static fl_status check_index_dtype(const ref_args *a, const fl_tensor *t, const char *name) {
    if (t->dtype != FL_INT64 && t->dtype != FL_INT32)
        return ref_fail(a, "%s must be int64 or int32, got %s", name, ref_dtype_name(t->dtype));
    return FL_SUCCESS;
}

/* dst[...] (op)= value read from src_ptr, both of dtype dt */
enum { PUT_COPY, PUT_ADD };
static void put_elem(char *dst, const char *src, int32_t dt, int mode) {
    if (mode == PUT_COPY) {
        memcpy(dst, src, ref_dtype_size(dt));
    } else if (ref_is_floating(dt)) {
        ref_store_f64(dst, dt, ref_load_f64(dst, dt) + ref_load_f64(src, dt));
    } else {
        ref_store_i64(dst, dt, (int64_t)((uint64_t)ref_load_i64(dst, dt) +
                                         (uint64_t)ref_load_i64(src, dt)));
    }
}

/* out = self unless they are the same view (in-place overloads) */
static fl_status copy_if_distinct(const ref_args *a, const fl_tensor *self, const fl_tensor *out) {
    if (ref_same_view(self, out))
        return FL_SUCCESS;
    void *buf;
    REF_TRY(ref_pack(a, self, out->dtype, &buf));
    ref_unpack(out, out->dtype, buf);
    ref_free(buf);
    return FL_SUCCESS;
}

/* ---- gather / scatter ---------------------------------------------------------- */

/* gather(self, dim, index, sparse_grad) -> out[i] = self[i with dim = index[i]] */
REF_KERNEL(ref_k_gather) {
    ref_args a;
    const fl_tensor *self, *index, *out;
    int64_t dim64;
    int32_t dim;
    REF_TRY(ref_args_init(&a, "gather", args, nargs, 5, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int(&a, 1, "dim", &dim64));
    REF_TRY(ref_get_tensor(&a, 2, "index", &index));
    REF_TRY(ref_get_tensor(&a, 4, "out", &out));
    REF_TRY(ref_wrap_dim(&a, dim64, self->ndim, &dim));
    if (ref_numel(index) == 0) /* PyTorch accepts any dtype for an empty index */
        return FL_SUCCESS;
    REF_TRY(check_index_dtype(&a, index, "index"));
    const int64_t size = self->ndim ? self->sizes[dim] : 1;
    int64_t idx[REF_MAX_DIMS] = {0}, src[REF_MAX_DIMS];
    do {
        const int64_t v = load_index(index, idx);
        if (v < 0 || v >= size)
            return ref_fail(&a, "index %lld is out of bounds for dimension %d with size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(src, idx, sizeof(int64_t) * (size_t)index->ndim);
        src[dim] = v;
        memcpy(ref_elem_ptr(out, idx), ref_elem_ptr(self, src), ref_dtype_size(out->dtype));
    } while (next_index(idx, index->sizes, index->ndim));
    return FL_SUCCESS;
}

/* out[i with dim = index[i]] (op)= src[i] (or value) over index's elements */
static fl_status scatter_into(const ref_args *a, const fl_tensor *out, int32_t dim,
                              const fl_tensor *index, const fl_tensor *src,
                              const ref_scalar *value, int mode) {
    if (ref_numel(index) == 0)
        return FL_SUCCESS;
    const int64_t size = out->ndim ? out->sizes[dim] : 1;
    char scalar[8];
    if (value)
        ref_store_f64(scalar, out->dtype, value->kind == FL_ARG_FLOAT ? value->f : (double)value->i);
    if (value && !ref_is_floating(out->dtype))
        ref_store_i64(scalar, out->dtype, value->kind == FL_ARG_FLOAT ? (int64_t)value->f : value->i);
    if (src && src->dtype != out->dtype)
        return ref_fail(a, "src dtype %s must match self dtype %s", ref_dtype_name(src->dtype),
                        ref_dtype_name(out->dtype));
    int64_t idx[REF_MAX_DIMS] = {0}, dst[REF_MAX_DIMS];
    do {
        const int64_t v = load_index(index, idx);
        if (v < 0 || v >= size)
            return ref_fail(a, "index %lld is out of bounds for dimension %d with size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(dst, idx, sizeof(int64_t) * (size_t)index->ndim);
        dst[dim] = v;
        put_elem(ref_elem_ptr(out, dst), src ? ref_elem_ptr(src, idx) : scalar, out->dtype, mode);
    } while (next_index(idx, index->sizes, index->ndim));
    return FL_SUCCESS;
}

/* scatter.src / scatter_.src / scatter_add / scatter_add_ (self, dim, index, src)
 * and scatter.value / scatter_.value (self, dim, index, value) */
static fl_status scatter_impl(const char *op, const fl_arg *args, uint32_t nargs,
                              ref_kernel_ctx *ctx, int with_value, int mode) {
    ref_args a;
    const fl_tensor *self, *index, *src = NULL, *out;
    ref_scalar value;
    int64_t dim64;
    int32_t dim;
    REF_TRY(ref_args_init(&a, op, args, nargs, 5, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int(&a, 1, "dim", &dim64));
    REF_TRY(ref_get_tensor(&a, 2, "index", &index));
    if (with_value)
        REF_TRY(ref_get_scalar(&a, 3, "value", &value));
    else
        REF_TRY(ref_get_tensor(&a, 3, "src", &src));
    REF_TRY(ref_get_tensor(&a, 4, "out", &out));
    REF_TRY(ref_wrap_dim(&a, dim64, self->ndim, &dim));
    if (ref_numel(index) > 0)
        REF_TRY(check_index_dtype(&a, index, "index"));
    REF_TRY(copy_if_distinct(&a, self, out));
    return scatter_into(&a, out, dim, index, src, with_value ? &value : NULL, mode);
}
#define K_SCATTER(FN, OP, WITH_VALUE, MODE) \
    REF_KERNEL(FN) { return scatter_impl(OP, args, nargs, ctx, WITH_VALUE, MODE); }
K_SCATTER(ref_k_scatter_src, "scatter.src", 0, PUT_COPY)
K_SCATTER(ref_k_scatter__src, "scatter_.src", 0, PUT_COPY)
K_SCATTER(ref_k_scatter_value, "scatter.value", 1, PUT_COPY)
K_SCATTER(ref_k_scatter__value, "scatter_.value", 1, PUT_COPY)
K_SCATTER(ref_k_scatter_add, "scatter_add", 0, PUT_ADD)
K_SCATTER(ref_k_scatter_add_, "scatter_add_", 0, PUT_ADD)

/* index_add(self, dim, index, source, *, alpha): out = self; out[.., index[j], ..] +=
 * alpha * source[.., j, ..] */
static fl_status index_add_impl(const char *op, const fl_arg *args, uint32_t nargs,
                                ref_kernel_ctx *ctx) {
    ref_args a;
    const fl_tensor *self, *index, *source, *out;
    ref_scalar alpha;
    int64_t dim64;
    int32_t dim;
    REF_TRY(ref_args_init(&a, op, args, nargs, 6, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int(&a, 1, "dim", &dim64));
    REF_TRY(ref_get_tensor(&a, 2, "index", &index));
    REF_TRY(ref_get_tensor(&a, 3, "source", &source));
    REF_TRY(ref_get_scalar(&a, 4, "alpha", &alpha));
    REF_TRY(ref_get_tensor(&a, 5, "out", &out));
    REF_TRY(ref_wrap_dim(&a, dim64, self->ndim, &dim));
    REF_TRY(check_index_dtype(&a, index, "index"));
    if (!ref_is_floating(out->dtype) || source->ndim != out->ndim)
        return ref_fail(&a, "float tensors of equal rank are supported (self %s, %d-d source)",
                        ref_dtype_name(out->dtype), (int)source->ndim);
    REF_TRY(copy_if_distinct(&a, self, out));
    if (ref_numel(source) == 0)
        return FL_SUCCESS;
    const int64_t size = out->ndim ? out->sizes[dim] : 1;
    int64_t idx[REF_MAX_DIMS] = {0}, dst[REF_MAX_DIMS], k[1];
    do {
        k[0] = source->ndim ? idx[dim] : 0;
        const int64_t v = load_index(index, k);
        if (v < 0 || v >= size)
            return ref_fail(&a, "index %lld is out of range for dimension %d of size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(dst, idx, sizeof(int64_t) * (size_t)source->ndim);
        if (source->ndim)
            dst[dim] = v;
        char *o = ref_elem_ptr(out, dst);
        const double s = ref_load_f64(ref_elem_ptr(source, idx), source->dtype);
        ref_store_f64(o, out->dtype, ref_load_f64(o, out->dtype) + alpha.f * s);
    } while (next_index(idx, source->sizes, source->ndim));
    return FL_SUCCESS;
}
REF_KERNEL(ref_k_index_add) { return index_add_impl("index_add", args, nargs, ctx); }
REF_KERNEL(ref_k_index_add_) { return index_add_impl("index_add_", args, nargs, ctx); }

/* ---- index_select ----------------------------------------------------------------- */

/* index_select(self, dim, index) */
REF_KERNEL(ref_k_index_select) {
    ref_args a;
    const fl_tensor *self, *index, *out;
    int64_t dim64;
    int32_t dim;
    REF_TRY(ref_args_init(&a, "index_select", args, nargs, 4, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int(&a, 1, "dim", &dim64));
    REF_TRY(ref_get_tensor(&a, 2, "index", &index));
    REF_TRY(ref_get_tensor(&a, 3, "out", &out));
    REF_TRY(ref_wrap_dim(&a, dim64, self->ndim, &dim));
    REF_TRY(check_index_dtype(&a, index, "index"));
    if (index->ndim > 1)
        return ref_fail(&a, "index must be 0-d or 1-d, got %d dims", (int)index->ndim);
    if (ref_numel(out) == 0)
        return FL_SUCCESS;
    const int64_t size = self->ndim ? self->sizes[dim] : 1;
    int64_t idx[REF_MAX_DIMS] = {0}, src[REF_MAX_DIMS], k[1];
    do {
        k[0] = out->ndim ? idx[dim] : 0;
        const int64_t v = load_index(index, k);
        if (v < 0 || v >= size)
            return ref_fail(&a, "index %lld is out of range for dimension %d of size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(src, idx, sizeof(int64_t) * (size_t)out->ndim);
        if (out->ndim)
            src[dim] = v;
        memcpy(ref_elem_ptr(out, idx), ref_elem_ptr(self, src), ref_dtype_size(out->dtype));
    } while (next_index(idx, out->sizes, out->ndim));
    return FL_SUCCESS;
}

/* ---- advanced indexing ------------------------------------------------------------ */

/* The iteration space of self[indices]: the broadcast index shape B stands in
 * for the indexed dims -- in their place when they are adjacent, in front
 * otherwise (NumPy's rule). */
typedef struct adv_index {
    const fl_tensor *self;
    const fl_tensor *const *ix; /* per self dim, NULL = not indexed */
    int ndim_b;
    int64_t bsizes[REF_MAX_DIMS];
    int64_t bstrides[REF_MAX_DIMS][REF_MAX_DIMS]; /* per self dim: index strides over B */
    int b_at;                                    /* position of B in the result */
    int ndim;                                    /* result dims */
    int64_t sizes[REF_MAX_DIMS];
} adv_index;

static fl_status adv_plan(const ref_args *a, const fl_tensor *self, const fl_tensor *const *ix,
                          uint32_t nix, adv_index *p) {
    memset(p, 0, sizeof *p);
    p->self = self;
    p->ix = ix;
    if ((int32_t)nix > self->ndim)
        return ref_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
    int first = -1, last = -1;
    for (uint32_t d = 0; d < nix; ++d) {
        if (!ix[d])
            continue;
        REF_TRY(check_index_dtype(a, ix[d], "indices"));
        first = first < 0 ? (int)d : first;
        last = (int)d;
        if (ix[d]->ndim > p->ndim_b)
            p->ndim_b = ix[d]->ndim;
    }
    if (first < 0)
        return ref_fail(a, "at least one index tensor is required");
    for (int k = 0; k < p->ndim_b; ++k)
        p->bsizes[k] = 1;
    for (uint32_t d = 0; d < nix; ++d)
        if (ix[d])
            for (int k = 0; k < ix[d]->ndim; ++k) {
                int64_t s = ix[d]->sizes[k];
                int64_t *bs = &p->bsizes[p->ndim_b - ix[d]->ndim + k];
                if (s != 1 && *bs != 1 && s != *bs)
                    return ref_fail(a, "shape mismatch: indexing tensors could not be broadcast");
                *bs = s != 1 ? s : *bs;
            }
    for (uint32_t d = 0; d < nix; ++d)
        if (ix[d]) {
            int64_t st[REF_MAX_DIMS];
            REF_TRY(ref_broadcast_strides(a, ix[d], "indices", p->ndim_b, p->bsizes, st));
            memcpy(p->bstrides[d], st, sizeof st);
        }
    int adjacent = 1;
    for (int d = first; d <= last; ++d)
        adjacent &= ix[d] != NULL;
    p->b_at = adjacent ? first : 0;
    int n = 0;
    for (int32_t d = 0; d < self->ndim; ++d) {
        if (d == p->b_at) /* B goes here: at the first indexed dim, or in front */
            for (int k = 0; k < p->ndim_b; ++k)
                p->sizes[n++] = p->bsizes[k];
        if ((uint32_t)d >= nix || !ix[d])
            p->sizes[n++] = self->sizes[d];
    }
    p->ndim = n;
    return FL_SUCCESS;
}

/* Boolean (and, as PyTorch still accepts, uint8) masks index the way NumPy
 * does: a k-d mask over self dims [d, d+k) stands for k long index tensors,
 * the coordinates of its nonzero elements (what PyTorch's expandTensors does
 * with nonzero()).  The coordinates live in one ref_alloc'd buffer per mask,
 * count x k row-major, so coordinate j is the view at byte offset 8*j with
 * stride k. */
typedef struct mask_indices {
    const fl_tensor *ix[REF_MAX_DIMS]; /* per self dim, NULL = not indexed */
    uint32_t n;
    fl_tensor views[REF_MAX_DIMS];
    int64_t counts[REF_MAX_DIMS], strides[REF_MAX_DIMS];
    void *coords[REF_MAX_DIMS];
} mask_indices;

static int is_mask(const fl_tensor *t) {
    return t && (t->dtype == FL_BOOL || t->dtype == FL_UINT8);
}

/* the nonzero coordinates of mask m (k dims) into a new count x k buffer */
static fl_status mask_coords(const ref_args *a, const fl_tensor *m, int64_t **coords,
                             int64_t *count) {
    const int64_t n = ref_numel(m);
    int64_t idx[REF_MAX_DIMS] = {0}, found = 0;
    *coords = ref_alloc((size_t)(n > 0 ? n : 1) * (size_t)(m->ndim > 0 ? m->ndim : 1) * 8);
    if (!*coords)
        return ref_fail(a, "out of host memory for a %lld-element mask", (long long)n);
    if (n > 0)
        do {
            if (ref_load_i64(ref_elem_ptr(m, idx), m->dtype) != 0)
                memcpy(*coords + found++ * m->ndim, idx, sizeof(int64_t) * (size_t)m->ndim);
        } while (next_index(idx, m->sizes, m->ndim));
    *count = found;
    return FL_SUCCESS;
}

/* one long index view per dim of mask m (its slot k in out), from self dim d on */
static fl_status expand_mask(const ref_args *a, const fl_tensor *self, const fl_tensor *m,
                             uint32_t k, int32_t d, mask_indices *out) {
    if (m->ndim == 0) /* NumPy would add a dim; PyTorch's index kernel refuses it too */
        return ref_fail(a, "indices[%u] is a 0-d mask; index with a 1-d or wider mask", k);
    if (d + m->ndim > self->ndim || out->n + (uint32_t)m->ndim > REF_MAX_DIMS)
        return ref_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
    for (int32_t j = 0; j < m->ndim; ++j)
        if (m->sizes[j] != self->sizes[d + j])
            return ref_fail(a, "the shape of the mask at index %u does not match the shape of the "
                            "indexed tensor at index %d (%lld vs %lld)", k + (unsigned)j, (int)(d + j),
                            (long long)m->sizes[j], (long long)self->sizes[d + j]);
    int64_t *coords, count;
    REF_TRY(mask_coords(a, m, &coords, &count));
    out->coords[k] = coords;
    out->counts[k] = count;
    out->strides[k] = m->ndim;
    for (int32_t j = 0; j < m->ndim; ++j) {
        out->views[out->n] = (fl_tensor){.struct_size = sizeof(fl_tensor),
                                         .base = (fl_devptr)(uintptr_t)coords,
                                         .byte_offset = (uint64_t)j * sizeof(int64_t),
                                         .dtype = FL_INT64, .ndim = 1,
                                         .sizes = &out->counts[k], .strides = &out->strides[k]};
        out->ix[out->n] = &out->views[out->n];
        out->n++;
    }
    return FL_SUCCESS;
}

static void free_masks(mask_indices *mi) {
    ref_free_all(mi->coords, REF_MAX_DIMS);
}

/* ix with every mask replaced by its coordinate tensors (free_masks after use) */
static fl_status expand_masks(const ref_args *a, const fl_tensor *self, const fl_tensor *const *ix,
                              uint32_t nix, mask_indices *mi) {
    memset(mi, 0, sizeof *mi);
    if (nix > REF_MAX_DIMS) /* every slot takes at least one self dim */
        return ref_fail(a, "too many indices (%u) for a tensor of dimension %d", nix, (int)self->ndim);
    for (uint32_t k = 0; k < nix; ++k) {
        fl_status st = FL_SUCCESS;
        if (is_mask(ix[k]))
            st = expand_mask(a, self, ix[k], k, (int32_t)mi->n, mi);
        else if (mi->n < REF_MAX_DIMS)
            mi->ix[mi->n++] = ix[k];
        else
            st = ref_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
        if (st != FL_SUCCESS) {
            free_masks(mi);
            return st;
        }
    }
    return FL_SUCCESS;
}

/* the self element for result multi-index r; 0 and a message on a bad index */
static char *adv_locate(const ref_args *a, const adv_index *p, uint32_t nix, const int64_t *r,
                        fl_status *st) {
    int64_t src[REF_MAX_DIMS];
    int n = 0;
    const int64_t *b = r + p->b_at;
    for (int32_t d = 0; d < p->self->ndim; ++d) {
        if ((uint32_t)d < nix && p->ix[d]) {
            const fl_tensor *t = p->ix[d];
            int64_t off = 0;
            for (int k = 0; k < p->ndim_b; ++k)
                off += b[k] * p->bstrides[d][k];
            const int64_t v = ref_load_i64((const char *)ref_tensor_data(t) + off, t->dtype);
            src[d] = wrap_index(v, p->self->sizes[d]);
            if (src[d] < 0) {
                *st = ref_fail(a, "index %lld is out of bounds for dimension %d with size %lld",
                               (long long)v, (int)d, (long long)p->self->sizes[d]);
                return NULL;
            }
        } else {
            if (n == p->b_at)
                n += p->ndim_b;
            src[d] = r[n++];
        }
    }
    return ref_elem_ptr(p->self, src);
}

/* out = self[ix] for long/int index tensors ix (masks already expanded) */
static fl_status index_gather(const ref_args *a, const fl_tensor *self, const mask_indices *mi,
                              const fl_tensor *out) {
    adv_index p;
    REF_TRY(adv_plan(a, self, mi->ix, mi->n, &p));
    if (p.ndim != out->ndim || numel_of(p.sizes, p.ndim) != ref_numel(out))
        return ref_fail(a, "the output's shape does not match the indexing result");
    if (ref_numel(out) == 0)
        return FL_SUCCESS;
    int64_t r[REF_MAX_DIMS] = {0};
    fl_status st = FL_SUCCESS;
    do {
        const char *src = adv_locate(a, &p, mi->n, r, &st);
        if (!src)
            return st;
        memcpy(ref_elem_ptr(out, r), src, ref_dtype_size(out->dtype));
    } while (next_index(r, p.sizes, p.ndim));
    return FL_SUCCESS;
}

/* index.Tensor(self, indices) */
REF_KERNEL(ref_k_index_tensor) {
    ref_args a;
    const fl_tensor *self, *out;
    const fl_tensor *const *ix;
    uint32_t nix;
    mask_indices mi;
    REF_TRY(ref_args_init(&a, "index.Tensor", args, nargs, 3, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_tensor_list(&a, 1, "indices", 1, &ix, &nix));
    REF_TRY(ref_get_tensor(&a, 2, "out", &out));
    REF_TRY(expand_masks(&a, self, ix, nix, &mi));
    const fl_status st = index_gather(&a, self, &mi, out);
    free_masks(&mi);
    return st;
}

/* self[ix] (op)= values, broadcast, for long/int index tensors ix (masks expanded) */
static fl_status index_scatter(const ref_args *a, const fl_tensor *self, const mask_indices *mi,
                               const fl_tensor *values, int accumulate) {
    adv_index p;
    REF_TRY(adv_plan(a, self, mi->ix, mi->n, &p));
    if (numel_of(p.sizes, p.ndim) == 0)
        return FL_SUCCESS;
    /* values broadcast to the indexing result, converted to self's dtype */
    int64_t vst[REF_MAX_DIMS];
    REF_TRY(ref_broadcast_strides(a, values, "values", p.ndim, p.sizes, vst));
    int64_t r[REF_MAX_DIMS] = {0};
    fl_status st = FL_SUCCESS;
    const size_t es = ref_dtype_size(self->dtype);
    do {
        char *dst = adv_locate(a, &p, mi->n, r, &st);
        if (!dst)
            return st;
        const char *vp = (const char *)ref_tensor_data(values);
        for (int k = 0; k < p.ndim; ++k)
            vp += r[k] * vst[k];
        char v[8];
        ref_convert(v, self->dtype, (int64_t)es, vp, values->dtype, 0, 1);
        put_elem(dst, v, self->dtype, accumulate ? PUT_ADD : PUT_COPY);
    } while (next_index(r, p.sizes, p.ndim));
    return FL_SUCCESS;
}

/* _index_put_impl_(self, indices, values, accumulate, unsafe) -> self */
REF_KERNEL(ref_k_index_put_impl_) {
    ref_args a;
    const fl_tensor *self, *values, *out;
    const fl_tensor *const *ix;
    uint32_t nix;
    int accumulate;
    mask_indices mi;
    REF_TRY(ref_args_init(&a, "_index_put_impl_", args, nargs, 6, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_tensor_list(&a, 1, "indices", 1, &ix, &nix));
    REF_TRY(ref_get_tensor(&a, 2, "values", &values));
    REF_TRY(ref_get_bool(&a, 3, "accumulate", &accumulate));
    REF_TRY(ref_get_tensor(&a, 5, "out", &out));
    REF_TRY(expand_masks(&a, self, ix, nix, &mi));
    const fl_status st = index_scatter(&a, self, &mi, values, accumulate);
    free_masks(&mi);
    return st;
}

/* ---- embedding backward ------------------------------------------------------------- */

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
 * scale_grad_by_freq) -> grad_weight [num_weights, D] */
REF_KERNEL(ref_k_embedding_dense_backward) {
    ref_args a;
    const fl_tensor *grad, *indices, *out;
    int64_t num_weights, padding_idx;
    int scale;
    REF_TRY(ref_args_init(&a, "embedding_dense_backward", args, nargs, 6, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "grad_output", &grad));
    REF_TRY(ref_get_tensor(&a, 1, "indices", &indices));
    REF_TRY(ref_get_int(&a, 2, "num_weights", &num_weights));
    REF_TRY(ref_get_int(&a, 3, "padding_idx", &padding_idx));
    REF_TRY(ref_get_bool(&a, 4, "scale_grad_by_freq", &scale));
    REF_TRY(ref_get_tensor(&a, 5, "out", &out));
    REF_TRY(check_index_dtype(&a, indices, "indices"));
    const int64_t n = ref_numel(indices), d = n ? ref_numel(grad) / n : 0;
    void *buf[4] = {0};
    fl_status st = ref_pack(&a, grad, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(&a, indices, FL_INT64, &buf[1]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, num_weights * d, (double **)&buf[2]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, num_weights, (double **)&buf[3]);
    if (st == FL_SUCCESS) {
        double *gw = buf[2], *counts = buf[3];
        const double *g = buf[0];
        const int64_t *ix = buf[1];
        memset(gw, 0, (size_t)(num_weights * d) * sizeof(double));
        memset(counts, 0, (size_t)num_weights * sizeof(double));
        for (int64_t i = 0; i < n && st == FL_SUCCESS; ++i)
            if (ix[i] < 0 || ix[i] >= num_weights)
                st = ref_fail(&a, "index %lld is out of range for %lld embeddings",
                              (long long)ix[i], (long long)num_weights);
            else
                counts[ix[i]] += 1.0;
        for (int64_t i = 0; i < n && st == FL_SUCCESS; ++i) {
            if (ix[i] == padding_idx)
                continue;
            const double w = scale ? 1.0 / counts[ix[i]] : 1.0;
            for (int64_t j = 0; j < d; ++j)
                gw[ix[i] * d + j] += g[i * d + j] * w;
        }
        if (st == FL_SUCCESS)
            ref_unpack(out, FL_FLOAT64, gw);
    }
    ref_free_all(buf, 4);
    return st;
}

/* ---- flip / roll -------------------------------------------------------------------- */

/* out[i] = self[src(i)] where src maps each dim by (i + shift) mod size or
 * size - 1 - i (flip) */
typedef struct dim_map {
    uint8_t flip[REF_MAX_DIMS];
    int64_t shift[REF_MAX_DIMS];
} dim_map;

static void copy_remapped(const fl_tensor *self, const fl_tensor *out, const dim_map *m) {
    if (ref_numel(out) == 0)
        return;
    int64_t idx[REF_MAX_DIMS] = {0}, src[REF_MAX_DIMS];
    do {
        for (int32_t d = 0; d < out->ndim; ++d) {
            const int64_t s = out->sizes[d];
            src[d] = m->flip[d] ? s - 1 - idx[d] : ((idx[d] - m->shift[d]) % s + s) % s;
        }
        memcpy(ref_elem_ptr(out, idx), ref_elem_ptr(self, src), ref_dtype_size(out->dtype));
    } while (next_index(idx, out->sizes, out->ndim));
}

/* flip(self, dims) */
REF_KERNEL(ref_k_flip) {
    ref_args a;
    const fl_tensor *self, *out;
    const int64_t *dims;
    uint32_t nd;
    dim_map m;
    memset(&m, 0, sizeof m);
    REF_TRY(ref_args_init(&a, "flip", args, nargs, 3, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int_list(&a, 1, "dims", &dims, &nd));
    REF_TRY(ref_get_tensor(&a, 2, "out", &out));
    for (uint32_t k = 0; k < nd; ++k) {
        int32_t d;
        REF_TRY(ref_wrap_dim(&a, dims[k], self->ndim, &d));
        if (self->ndim && m.flip[d])
            return ref_fail(&a, "dim %d appears multiple times in the list of dims", (int)d);
        m.flip[d] = self->ndim > 0;
    }
    copy_remapped(self, out, &m);
    return FL_SUCCESS;
}

/* roll of the flattened tensor (logical order), shape kept */
static fl_status roll_flat(const ref_args *a, const fl_tensor *self, const fl_tensor *out,
                           int64_t shift) {
    const int64_t n = ref_numel(self);
    if (n == 0)
        return FL_SUCCESS;
    const size_t es = ref_dtype_size(self->dtype);
    char *src, *dst = (char *)ref_alloc((size_t)n * es);
    if (!dst)
        return ref_fail(a, "out of host memory rolling %lld elements", (long long)n);
    fl_status st = ref_pack(a, self, self->dtype, (void **)&src);
    if (st == FL_SUCCESS) {
        const int64_t k = ((shift % n) + n) % n;
        memcpy(dst + (size_t)k * es, src, (size_t)(n - k) * es);
        memcpy(dst, src + (size_t)(n - k) * es, (size_t)k * es);
        ref_unpack(out, self->dtype, dst);
    }
    ref_free(src);
    ref_free(dst);
    return st;
}

/* roll(self, shifts, dims): no dims rolls the flattened tensor */
REF_KERNEL(ref_k_roll) {
    ref_args a;
    const fl_tensor *self, *out;
    const int64_t *shifts, *dims;
    uint32_t ns, nd;
    dim_map m;
    memset(&m, 0, sizeof m);
    REF_TRY(ref_args_init(&a, "roll", args, nargs, 4, ctx));
    REF_TRY(ref_get_tensor(&a, 0, "self", &self));
    REF_TRY(ref_get_int_list(&a, 1, "shifts", &shifts, &ns));
    REF_TRY(ref_get_int_list(&a, 2, "dims", &dims, &nd));
    REF_TRY(ref_get_tensor(&a, 3, "out", &out));
    if (nd == 0 && ns == 1)
        return roll_flat(&a, self, out, shifts[0]);
    if (nd != ns)
        return ref_fail(&a, "shifts (%u) and dims (%u) must have the same length", ns, nd);
    for (uint32_t k = 0; k < nd; ++k) {
        int32_t d;
        REF_TRY(ref_wrap_dim(&a, dims[k], self->ndim, &d));
        m.shift[d] += shifts[k];
    }
    copy_remapped(self, out, &m);
    return FL_SUCCESS;
}
