/*
 * index.c -- data movement by index: gather, scatter (src / value / add,
 * out-of-place and in-place), index_add, index_select, index.Tensor
 * (advanced indexing with long/int index tensors and bool/uint8 masks),
 * _index_put_impl_ (assign or accumulate), embedding_dense_backward.
 *
 * Each op walks the multi-indices of one iteration space (the index tensor,
 * or the output) and maps them to a source and a destination element, with
 * bounds checks that fail the kernel with the offending index.  Copies move
 * raw elements (the runtime gives both sides the same dtype); accumulation
 * goes through float64 (floats) or int64 (integers).
 */
#include "fl_kernel.h"
#include "util/pack.h"

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
    return flk_load_i64(flk_elem_ptr(t, idx), t->dtype);
}

/* wrap a possibly negative index against size; -1 when out of range */
static int64_t wrap_index(int64_t v, int64_t size) {
    if (v < -size || v >= size)
        return -1;
    return v < 0 ? v + size : v;
}

static fl_status check_index_dtype(const flk_args *a, const fl_tensor *t, const char *name) {
    if (t->dtype != FL_INT64 && t->dtype != FL_INT32)
        return flk_fail(a, "%s must be int64 or int32, got %s", name, flk_dtype_name(t->dtype));
    return FL_SUCCESS;
}

/* dst[...] (op)= value read from src_ptr, both of dtype dt */
enum { PUT_COPY, PUT_ADD };
static void put_elem(char *dst, const char *src, int32_t dt, int mode) {
    if (mode == PUT_COPY) {
        memcpy(dst, src, flk_dtype_size(dt));
    } else if (flk_is_floating(dt)) {
        flk_store_f64(dst, dt, flk_load_f64(dst, dt) + flk_load_f64(src, dt));
    } else {
        flk_store_i64(dst, dt, (int64_t)((uint64_t)flk_load_i64(dst, dt) +
                                         (uint64_t)flk_load_i64(src, dt)));
    }
}

/* out = self unless they are the same view (in-place overloads) */
static fl_status copy_if_distinct(const flk_args *a, const fl_tensor *self, const fl_tensor *out) {
    if (flk_same_view(self, out))
        return FL_SUCCESS;
    void *buf;
    FLK_TRY(ref_pack(a, self, out->dtype, &buf));
    ref_unpack(out, out->dtype, buf);
    flk_free(buf);
    return FL_SUCCESS;
}

/* ---- gather / scatter ---------------------------------------------------------- */

/* gather(self, dim, index, sparse_grad) -> out[i] = self[i with dim = index[i]] */
FLK_KERNEL_FN(k_gather) {
    flk_args a;
    const fl_tensor *self, *index, *out;
    int64_t dim64;
    int32_t dim;
    FLK_TRY(flk_args_init(&a, "gather", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim64));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    FLK_TRY(flk_wrap_dim(&a, dim64, self->ndim, &dim));
    if (flk_numel(index) == 0) /* PyTorch accepts any dtype for an empty index */
        return FL_SUCCESS;
    FLK_TRY(check_index_dtype(&a, index, "index"));
    const int64_t size = self->ndim ? self->sizes[dim] : 1;
    int64_t idx[FLK_MAX_DIMS] = {0}, src[FLK_MAX_DIMS];
    do {
        const int64_t v = load_index(index, idx);
        if (v < 0 || v >= size)
            return flk_fail(&a, "index %lld is out of bounds for dimension %d with size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(src, idx, sizeof(int64_t) * (size_t)index->ndim);
        src[dim] = v;
        memcpy(flk_elem_ptr(out, idx), flk_elem_ptr(self, src), flk_dtype_size(out->dtype));
    } while (next_index(idx, index->sizes, index->ndim));
    return FL_SUCCESS;
}
FLK_REGISTER("gather", FLK_REAL_TYPES, k_gather);

/* out[i with dim = index[i]] (op)= src[i] (or value) over index's elements */
static fl_status scatter_into(const flk_args *a, const fl_tensor *out, int32_t dim,
                              const fl_tensor *index, const fl_tensor *src,
                              const flk_scalar *value, int mode) {
    if (flk_numel(index) == 0)
        return FL_SUCCESS;
    const int64_t size = out->ndim ? out->sizes[dim] : 1;
    char scalar[8];
    if (value)
        flk_store_f64(scalar, out->dtype, value->kind == FL_ARG_FLOAT ? value->f : (double)value->i);
    if (value && !flk_is_floating(out->dtype))
        flk_store_i64(scalar, out->dtype, value->kind == FL_ARG_FLOAT ? (int64_t)value->f : value->i);
    if (src && src->dtype != out->dtype)
        return flk_fail(a, "src dtype %s must match self dtype %s", flk_dtype_name(src->dtype),
                        flk_dtype_name(out->dtype));
    int64_t idx[FLK_MAX_DIMS] = {0}, dst[FLK_MAX_DIMS];
    do {
        const int64_t v = load_index(index, idx);
        if (v < 0 || v >= size)
            return flk_fail(a, "index %lld is out of bounds for dimension %d with size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(dst, idx, sizeof(int64_t) * (size_t)index->ndim);
        dst[dim] = v;
        put_elem(flk_elem_ptr(out, dst), src ? flk_elem_ptr(src, idx) : scalar, out->dtype, mode);
    } while (next_index(idx, index->sizes, index->ndim));
    return FL_SUCCESS;
}

/* scatter.src / scatter_.src / scatter_add / scatter_add_ (self, dim, index, src)
 * and scatter.value / scatter_.value (self, dim, index, value) */
static fl_status scatter_impl(const char *op, const fl_arg *args, uint32_t nargs,
                              flk_ctx *ctx, int with_value, int mode) {
    flk_args a;
    const fl_tensor *self, *index, *src = NULL, *out;
    flk_scalar value;
    int64_t dim64;
    int32_t dim;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim64));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    if (with_value)
        FLK_TRY(flk_get_scalar(&a, 3, "value", &value));
    else
        FLK_TRY(flk_get_tensor(&a, 3, "src", &src));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    FLK_TRY(flk_wrap_dim(&a, dim64, self->ndim, &dim));
    if (flk_numel(index) > 0)
        FLK_TRY(check_index_dtype(&a, index, "index"));
    flk_unshared copy = {.memory = NULL};     /* src in self's memory: read it before self is written */
    if (src)
        FLK_TRY(flk_unshare(&a, out, src, 1, &copy, &src));
    fl_status st = copy_if_distinct(&a, self, out);
    if (st == FL_SUCCESS)
        st = scatter_into(&a, out, dim, index, src, with_value ? &value : NULL, mode);
    flk_unshared_free(&copy);
    return st;
}
#define K_SCATTER(FN, OP, WITH_VALUE, MODE) \
    FLK_KERNEL_FN(FN) { return scatter_impl(OP, args, nargs, ctx, WITH_VALUE, MODE); }
K_SCATTER(k_scatter_src, "scatter.src", 0, PUT_COPY)
FLK_REGISTER("scatter.src", FLK_REAL_TYPES, k_scatter_src);
K_SCATTER(k_scatter__src, "scatter_.src", 0, PUT_COPY)
FLK_REGISTER("scatter_.src", FLK_REAL_TYPES, k_scatter__src);
K_SCATTER(k_scatter_value, "scatter.value", 1, PUT_COPY)
FLK_REGISTER("scatter.value", FLK_REAL_TYPES, k_scatter_value);
K_SCATTER(k_scatter__value, "scatter_.value", 1, PUT_COPY)
FLK_REGISTER("scatter_.value", FLK_REAL_TYPES, k_scatter__value);
K_SCATTER(k_scatter_add, "scatter_add", 0, PUT_ADD)
FLK_REGISTER("scatter_add", FLK_REAL_TYPES, k_scatter_add);
K_SCATTER(k_scatter_add_, "scatter_add_", 0, PUT_ADD)
FLK_REGISTER("scatter_add_", FLK_REAL_TYPES, k_scatter_add_);

/* out[.., index[j], ..] += alpha * source[.., j, ..] */
static fl_status add_at_index(const flk_args *a, const fl_tensor *out, int32_t dim, const fl_tensor *index,
                              const fl_tensor *source, double alpha) {
    const int64_t size = out->ndim ? out->sizes[dim] : 1;
    int64_t idx[FLK_MAX_DIMS] = {0}, dst[FLK_MAX_DIMS], k[1];
    do {
        k[0] = source->ndim ? idx[dim] : 0;
        const int64_t v = load_index(index, k);
        if (v < 0 || v >= size)
            return flk_fail(a, "index %lld is out of range for dimension %d of size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(dst, idx, sizeof(int64_t) * (size_t)source->ndim);
        if (source->ndim)
            dst[dim] = v;
        char *o = flk_elem_ptr(out, dst);
        const double s = flk_load_f64(flk_elem_ptr(source, idx), source->dtype);
        flk_store_f64(o, out->dtype, flk_load_f64(o, out->dtype) + alpha * s);
    } while (next_index(idx, source->sizes, source->ndim));
    return FL_SUCCESS;
}

/* index_add(self, dim, index, source, *, alpha): out = self; out[.., index[j], ..] +=
 * alpha * source[.., j, ..] */
static fl_status index_add_impl(const char *op, const fl_arg *args, uint32_t nargs,
                                flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *self, *index, *source, *out;
    flk_scalar alpha;
    int64_t dim64;
    int32_t dim;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim64));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    FLK_TRY(flk_get_tensor(&a, 3, "source", &source));
    FLK_TRY(flk_get_scalar(&a, 4, "alpha", &alpha));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(flk_wrap_dim(&a, dim64, self->ndim, &dim));
    FLK_TRY(check_index_dtype(&a, index, "index"));
    if (!flk_is_floating(out->dtype) || source->ndim != out->ndim)
        return flk_fail(&a, "float tensors of equal rank are supported (self %s, %d-d source)",
                        flk_dtype_name(out->dtype), (int)source->ndim);
    flk_unshared copy;     /* source in self's memory: read it before self is written */
    FLK_TRY(flk_unshare(&a, out, source, 1, &copy, &source));
    fl_status st = copy_if_distinct(&a, self, out);
    if (st == FL_SUCCESS && flk_numel(source) > 0)
        st = add_at_index(&a, out, dim, index, source, alpha.f);
    flk_unshared_free(&copy);
    return st;
}

FLK_KERNEL_FN(k_index_add) { return index_add_impl("index_add", args, nargs, ctx); }
FLK_REGISTER("index_add", FLK_FLOAT_TYPES, k_index_add);
FLK_KERNEL_FN(k_index_add_) { return index_add_impl("index_add_", args, nargs, ctx); }
FLK_REGISTER("index_add_", FLK_FLOAT_TYPES, k_index_add_);

/* ---- index_select ----------------------------------------------------------------- */

/* index_select(self, dim, index) */
FLK_KERNEL_FN(k_index_select) {
    flk_args a;
    const fl_tensor *self, *index, *out;
    int64_t dim64;
    int32_t dim;
    FLK_TRY(flk_args_init(&a, "index_select", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int(&a, 1, "dim", &dim64));
    FLK_TRY(flk_get_tensor(&a, 2, "index", &index));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    FLK_TRY(flk_wrap_dim(&a, dim64, self->ndim, &dim));
    FLK_TRY(check_index_dtype(&a, index, "index"));
    if (index->ndim > 1)
        return flk_fail(&a, "index must be 0-d or 1-d, got %d dims", (int)index->ndim);
    if (flk_numel(out) == 0)
        return FL_SUCCESS;
    const int64_t size = self->ndim ? self->sizes[dim] : 1;
    int64_t idx[FLK_MAX_DIMS] = {0}, src[FLK_MAX_DIMS], k[1];
    if (dim == 0 && self->ndim >= 1 && out->ndim == self->ndim && flk_is_contiguous(self) &&
        flk_is_contiguous(out) && !flk_may_overlap(self, out)) {
        /* rows of contiguous tensors (an embedding lookup): one memcpy per index, in
         * the order and with the error of the element loop below */
        const size_t row = (size_t)(flk_numel(out) / out->sizes[0]) * flk_dtype_size(out->dtype);
        for (int64_t i = 0; i < out->sizes[0]; ++i) {
            k[0] = i;
            const int64_t v = load_index(index, k);
            if (v < 0 || v >= size)
                return flk_fail(&a, "index %lld is out of range for dimension %d of size %lld",
                                (long long)v, (int)dim, (long long)size);
            memcpy((char *)flk_data(out) + (size_t)i * row,
                   (const char *)flk_data(self) + (size_t)v * row, row);
        }
        return FL_SUCCESS;
    }
    do {
        k[0] = out->ndim ? idx[dim] : 0;
        const int64_t v = load_index(index, k);
        if (v < 0 || v >= size)
            return flk_fail(&a, "index %lld is out of range for dimension %d of size %lld",
                            (long long)v, (int)dim, (long long)size);
        memcpy(src, idx, sizeof(int64_t) * (size_t)out->ndim);
        if (out->ndim)
            src[dim] = v;
        memcpy(flk_elem_ptr(out, idx), flk_elem_ptr(self, src), flk_dtype_size(out->dtype));
    } while (next_index(idx, out->sizes, out->ndim));
    return FL_SUCCESS;
}
FLK_REGISTER("index_select", FLK_REAL_TYPES, k_index_select);

/* ---- advanced indexing ------------------------------------------------------------ */

/* The iteration space of self[indices]: the broadcast index shape B stands in
 * for the indexed dims -- in their place when they are adjacent, in front
 * otherwise (NumPy's rule). */
typedef struct adv_index {
    const fl_tensor *self;
    const fl_tensor *const *ix; /* per self dim, NULL = not indexed */
    int ndim_b;
    int64_t bsizes[FLK_MAX_DIMS];
    int64_t bstrides[FLK_MAX_DIMS][FLK_MAX_DIMS]; /* per self dim: index strides over B */
    int b_at;                                    /* position of B in the result */
    int ndim;                                    /* result dims */
    int64_t sizes[FLK_MAX_DIMS];
} adv_index;

static fl_status adv_plan(const flk_args *a, const fl_tensor *self, const fl_tensor *const *ix,
                          uint32_t nix, adv_index *p) {
    memset(p, 0, sizeof *p);
    p->self = self;
    p->ix = ix;
    if ((int32_t)nix > self->ndim)
        return flk_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
    int first = -1, last = -1;
    for (uint32_t d = 0; d < nix; ++d) {
        if (!ix[d])
            continue;
        FLK_TRY(check_index_dtype(a, ix[d], "indices"));
        first = first < 0 ? (int)d : first;
        last = (int)d;
        if (ix[d]->ndim > p->ndim_b)
            p->ndim_b = ix[d]->ndim;
    }
    if (first < 0)
        return flk_fail(a, "at least one index tensor is required");
    for (int k = 0; k < p->ndim_b; ++k)
        p->bsizes[k] = 1;
    for (uint32_t d = 0; d < nix; ++d)
        if (ix[d])
            for (int k = 0; k < ix[d]->ndim; ++k) {
                int64_t s = ix[d]->sizes[k];
                int64_t *bs = &p->bsizes[p->ndim_b - ix[d]->ndim + k];
                if (s != 1 && *bs != 1 && s != *bs)
                    return flk_fail(a, "shape mismatch: indexing tensors could not be broadcast");
                *bs = s != 1 ? s : *bs;
            }
    for (uint32_t d = 0; d < nix; ++d)
        if (ix[d]) {
            int64_t st[FLK_MAX_DIMS];
            FLK_TRY(flk_broadcast_strides(a, ix[d], "indices", p->ndim_b, p->bsizes, st));
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
 * with nonzero()).  The coordinates live in one flk_alloc'd buffer per mask,
 * count x k row-major, so coordinate j is the view at byte offset 8*j with
 * stride k. */
typedef struct mask_indices {
    const fl_tensor *ix[FLK_MAX_DIMS]; /* per self dim, NULL = not indexed */
    uint32_t n;
    fl_tensor views[FLK_MAX_DIMS];
    int64_t counts[FLK_MAX_DIMS], strides[FLK_MAX_DIMS];
    void *coords[FLK_MAX_DIMS];
} mask_indices;

static int is_mask(const fl_tensor *t) {
    return t && (t->dtype == FL_BOOL || t->dtype == FL_UINT8);
}

/* the nonzero coordinates of mask m (k dims) into a new count x k buffer */
static fl_status mask_coords(const flk_args *a, const fl_tensor *m, int64_t **coords,
                             int64_t *count) {
    const int64_t n = flk_numel(m);
    int64_t idx[FLK_MAX_DIMS] = {0}, found = 0;
    *coords = flk_alloc((size_t)(n > 0 ? n : 1) * (size_t)(m->ndim > 0 ? m->ndim : 1) * 8);
    if (!*coords)
        return flk_fail(a, "out of host memory for a %lld-element mask", (long long)n);
    if (n > 0)
        do {
            if (flk_load_i64(flk_elem_ptr(m, idx), m->dtype) != 0)
                memcpy(*coords + found++ * m->ndim, idx, sizeof(int64_t) * (size_t)m->ndim);
        } while (next_index(idx, m->sizes, m->ndim));
    *count = found;
    return FL_SUCCESS;
}

/* one long index view per dim of mask m (its slot k in out), from self dim d on */
static fl_status expand_mask(const flk_args *a, const fl_tensor *self, const fl_tensor *m,
                             uint32_t k, int32_t d, mask_indices *out) {
    if (m->ndim == 0) /* NumPy would add a dim; PyTorch's index kernel refuses it too */
        return flk_fail(a, "indices[%u] is a 0-d mask; index with a 1-d or wider mask", k);
    if (d + m->ndim > self->ndim || out->n + (uint32_t)m->ndim > FLK_MAX_DIMS)
        return flk_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
    for (int32_t j = 0; j < m->ndim; ++j)
        if (m->sizes[j] != self->sizes[d + j])
            return flk_fail(a, "the shape of the mask at index %u does not match the shape of the "
                            "indexed tensor at index %d (%lld vs %lld)", k + (unsigned)j, (int)(d + j),
                            (long long)m->sizes[j], (long long)self->sizes[d + j]);
    int64_t *coords, count;
    FLK_TRY(mask_coords(a, m, &coords, &count));
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
    ref_free_all(mi->coords, FLK_MAX_DIMS);
}

/* ix with every mask replaced by its coordinate tensors (free_masks after use) */
static fl_status expand_masks(const flk_args *a, const fl_tensor *self, const fl_tensor *const *ix,
                              uint32_t nix, mask_indices *mi) {
    memset(mi, 0, sizeof *mi);
    if (nix > FLK_MAX_DIMS) /* every slot takes at least one self dim */
        return flk_fail(a, "too many indices (%u) for a tensor of dimension %d", nix, (int)self->ndim);
    for (uint32_t k = 0; k < nix; ++k) {
        fl_status st = FL_SUCCESS;
        if (is_mask(ix[k]))
            st = expand_mask(a, self, ix[k], k, (int32_t)mi->n, mi);
        else if (mi->n < FLK_MAX_DIMS)
            mi->ix[mi->n++] = ix[k];
        else
            st = flk_fail(a, "too many indices for a tensor of dimension %d", (int)self->ndim);
        if (st != FL_SUCCESS) {
            free_masks(mi);
            return st;
        }
    }
    return FL_SUCCESS;
}

/* the self element for result multi-index r; 0 and a message on a bad index */
static char *adv_locate(const flk_args *a, const adv_index *p, uint32_t nix, const int64_t *r,
                        fl_status *st) {
    int64_t src[FLK_MAX_DIMS];
    int n = 0;
    const int64_t *b = r + p->b_at;
    for (int32_t d = 0; d < p->self->ndim; ++d) {
        if ((uint32_t)d < nix && p->ix[d]) {
            const fl_tensor *t = p->ix[d];
            int64_t off = 0;
            for (int k = 0; k < p->ndim_b; ++k)
                off += b[k] * p->bstrides[d][k];
            const int64_t v = flk_load_i64((const char *)flk_data(t) + off, t->dtype);
            src[d] = wrap_index(v, p->self->sizes[d]);
            if (src[d] < 0) {
                *st = flk_fail(a, "index %lld is out of bounds for dimension %d with size %lld",
                               (long long)v, (int)d, (long long)p->self->sizes[d]);
                return NULL;
            }
        } else {
            if (n == p->b_at)
                n += p->ndim_b;
            src[d] = r[n++];
        }
    }
    return flk_elem_ptr(p->self, src);
}

/* out = self[ix] for long/int index tensors ix (masks already expanded) */
static fl_status index_gather(const flk_args *a, const fl_tensor *self, const mask_indices *mi,
                              const fl_tensor *out) {
    adv_index p;
    FLK_TRY(adv_plan(a, self, mi->ix, mi->n, &p));
    if (p.ndim != out->ndim || numel_of(p.sizes, p.ndim) != flk_numel(out))
        return flk_fail(a, "the output's shape does not match the indexing result");
    if (flk_numel(out) == 0)
        return FL_SUCCESS;
    int64_t r[FLK_MAX_DIMS] = {0};
    fl_status st = FL_SUCCESS;
    do {
        const char *src = adv_locate(a, &p, mi->n, r, &st);
        if (!src)
            return st;
        memcpy(flk_elem_ptr(out, r), src, flk_dtype_size(out->dtype));
    } while (next_index(r, p.sizes, p.ndim));
    return FL_SUCCESS;
}

/* index.Tensor(self, indices) */
FLK_KERNEL_FN(k_index_tensor) {
    flk_args a;
    const fl_tensor *self, *out;
    const fl_tensor *const *ix;
    uint32_t nix;
    mask_indices mi;
    FLK_TRY(flk_args_init(&a, "index.Tensor", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor_list(&a, 1, "indices", 1, &ix, &nix));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    FLK_TRY(expand_masks(&a, self, ix, nix, &mi));
    const fl_status st = index_gather(&a, self, &mi, out);
    free_masks(&mi);
    return st;
}
FLK_REGISTER("index.Tensor", FLK_REAL_TYPES, k_index_tensor);

/* self[ix] (op)= values, broadcast, for long/int index tensors ix (masks expanded) */
static fl_status index_scatter(const flk_args *a, const fl_tensor *self, const mask_indices *mi,
                               const fl_tensor *values, int accumulate) {
    adv_index p;
    FLK_TRY(adv_plan(a, self, mi->ix, mi->n, &p));
    if (numel_of(p.sizes, p.ndim) == 0)
        return FL_SUCCESS;
    /* values broadcast to the indexing result, converted to self's dtype */
    int64_t vst[FLK_MAX_DIMS];
    FLK_TRY(flk_broadcast_strides(a, values, "values", p.ndim, p.sizes, vst));
    int64_t r[FLK_MAX_DIMS] = {0};
    fl_status st = FL_SUCCESS;
    const size_t es = flk_dtype_size(self->dtype);
    do {
        char *dst = adv_locate(a, &p, mi->n, r, &st);
        if (!dst)
            return st;
        const char *vp = (const char *)flk_data(values);
        for (int k = 0; k < p.ndim; ++k)
            vp += r[k] * vst[k];
        char v[8];
        flk_convert(v, self->dtype, (int64_t)es, vp, values->dtype, 0, 1);
        put_elem(dst, v, self->dtype, accumulate ? PUT_ADD : PUT_COPY);
    } while (next_index(r, p.sizes, p.ndim));
    return FL_SUCCESS;
}

/* _index_put_impl_(self, indices, values, accumulate, unsafe) -> self */
FLK_KERNEL_FN(k_index_put_impl_) {
    flk_args a;
    const fl_tensor *self, *values, *out;
    const fl_tensor *const *ix;
    uint32_t nix;
    int accumulate;
    mask_indices mi;
    FLK_TRY(flk_args_init(&a, "_index_put_impl_", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_tensor_list(&a, 1, "indices", 1, &ix, &nix));
    FLK_TRY(flk_get_tensor(&a, 2, "values", &values));
    FLK_TRY(flk_get_bool(&a, 3, "accumulate", &accumulate));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    flk_unshared copy;     /* values in self's memory: read them before self is written */
    FLK_TRY(flk_unshare(&a, self, values, 1, &copy, &values));
    fl_status st = expand_masks(&a, self, ix, nix, &mi);
    if (st == FL_SUCCESS) {
        st = index_scatter(&a, self, &mi, values, accumulate);
        free_masks(&mi);
    }
    flk_unshared_free(&copy);
    return st;
}
FLK_REGISTER("_index_put_impl_", FLK_REAL_TYPES, k_index_put_impl_);

/* ---- embedding backward ------------------------------------------------------------- */

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
 * scale_grad_by_freq) -> grad_weight [num_weights, D] */
FLK_KERNEL_FN(k_embedding_dense_backward) {
    flk_args a;
    const fl_tensor *grad, *indices, *out;
    int64_t num_weights, padding_idx;
    int scale;
    FLK_TRY(flk_args_init(&a, "embedding_dense_backward", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &grad));
    FLK_TRY(flk_get_tensor(&a, 1, "indices", &indices));
    FLK_TRY(flk_get_int(&a, 2, "num_weights", &num_weights));
    FLK_TRY(flk_get_int(&a, 3, "padding_idx", &padding_idx));
    FLK_TRY(flk_get_bool(&a, 4, "scale_grad_by_freq", &scale));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(check_index_dtype(&a, indices, "indices"));
    const int64_t n = flk_numel(indices), d = n ? flk_numel(grad) / n : 0;
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
                st = flk_fail(&a, "index %lld is out of range for %lld embeddings",
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
FLK_REGISTER("embedding_dense_backward", FLK_FLOAT_TYPES, k_embedding_dense_backward);
