/*
 * copy.c -- copy_ (any dtype to any dtype, float8 included, broadcasting,
 * arbitrary strides on both sides, overlapping src/dst handled through a
 * temporary), fill_.Scalar and zero_ for every dtype.
 */
#include "fl_kernel.h"

typedef struct copy_ctx {
    int32_t ddt, sdt;
} copy_ctx;

static void copy_row(char **p, const int64_t *st, int64_t n, void *vc) {
    const copy_ctx *c = (const copy_ctx *)vc;
    flk_convert(p[0], c->ddt, st[0], p[1], c->sdt, st[1], n);
}

/*
 * Transposing copies (dst contiguous along its inner dim, src contiguous
 * along another one, e.g. x.t().contiguous()) walk one side with a large
 * stride; copying 8x8 tiles keeps both sides in cache (larger tiles
 * thrash L1 sets when the large stride is a power of two).
 */
#define TILE 8
/* same-dtype tile: dst contiguous along j, src contiguous along i */
#define TILE_LOOP(TU)                                                              \
    do {                                                                           \
        const int64_t dti = st[0][t] / des, sj = st[1][in] / ses;                  \
        TU *D = (TU *)dt_;                                                         \
        const TU *S = (const TU *)st_;                                             \
        for (int64_t i = 0; i < ni; ++i)                                           \
            for (int64_t j = 0; j < nj; ++j)                                       \
                D[i * dti + j] = S[i + j * sj];                                    \
    } while (0)
static int copy_tiled(int ndim, const int64_t *sizes, char *const *ptrs,
                      int64_t strides[][FLK_MAX_DIMS], const copy_ctx *c) {
    int64_t sz[FLK_MAX_DIMS], st[2][FLK_MAX_DIMS];
    int nd = flk_simplify_dims(ndim, sizes, 2, strides, 0, sz, st);
    if (nd < 2)
        return 0;
    const int64_t des = (int64_t)flk_dtype_size(c->ddt), ses = (int64_t)flk_dtype_size(c->sdt);
    const int in = nd - 1;
    if (st[0][in] != des || st[1][in] == ses || sz[in] < TILE)
        return 0;
    int t = -1;
    for (int d = in - 1; d >= 0; --d)
        if (st[1][d] == ses && sz[d] >= TILE) {
            t = d;
            break;
        }
    if (t < 0)
        return 0;
    /* iterate every dim but t and in; tile (t, in) */
    int64_t idx[FLK_MAX_DIMS] = {0};
    for (;;) {
        char *d0 = ptrs[0], *s0 = ptrs[1];
        for (int d = 0; d < nd; ++d) {
            d0 += idx[d] * st[0][d];
            s0 += idx[d] * st[1][d];
        }
        for (int64_t i0 = 0; i0 < sz[t]; i0 += TILE) {
            int64_t ni = sz[t] - i0 < TILE ? sz[t] - i0 : TILE;
            for (int64_t j0 = 0; j0 < sz[in]; j0 += TILE) {
                int64_t nj = sz[in] - j0 < TILE ? sz[in] - j0 : TILE;
                char *dt_ = d0 + i0 * st[0][t] + j0 * st[0][in];
                const char *st_ = s0 + i0 * st[1][t] + j0 * st[1][in];
                if (c->ddt == c->sdt && des == 4)
                    TILE_LOOP(flk_i32);
                else if (c->ddt == c->sdt && des == 8)
                    TILE_LOOP(flk_i64);
                else
                    for (int64_t i = 0; i < ni; ++i)
                        flk_convert(dt_ + i * st[0][t], c->ddt, st[0][in], st_ + i * st[1][t],
                                    c->sdt, st[1][in], nj);
            }
        }
        int d = nd - 1;
        for (; d >= 0; --d) {
            if (d == t || d == in)
                continue;
            if (++idx[d] < sz[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
    return 1;
}

typedef struct fill_ctx {
    size_t es;
    unsigned char pattern[8];
    int zero;
} fill_ctx;

static void fill_row(char **p, const int64_t *st, int64_t n, void *vc) {
    const fill_ctx *c = (const fill_ctx *)vc;
    char *d = p[0];
    int64_t s = st[0];
    if (s == (int64_t)c->es && c->zero) {
        memset(d, 0, (size_t)n * c->es);
        return;
    }
    switch (c->es) {
    case 1: {
        uint8_t v = c->pattern[0];
        if (s == 1)
            memset(d, v, (size_t)n);
        else
            for (int64_t i = 0; i < n; ++i)
                *(flk_u8 *)(d + i * s) = v;
        break;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, c->pattern, 2);
        if (s == 2)
            for (int64_t i = 0; i < n; ++i)
                ((flk_u16 *)d)[i] = v;
        else
            for (int64_t i = 0; i < n; ++i)
                *(flk_u16 *)(d + i * s) = v;
        break;
    }
    case 4: {
        int32_t v;
        memcpy(&v, c->pattern, 4);
        if (s == 4)
            for (int64_t i = 0; i < n; ++i)
                ((flk_i32 *)d)[i] = v;
        else
            for (int64_t i = 0; i < n; ++i)
                *(flk_i32 *)(d + i * s) = v;
        break;
    }
    default: {
        int64_t v;
        memcpy(&v, c->pattern, 8);
        if (s == 8)
            for (int64_t i = 0; i < n; ++i)
                ((flk_i64 *)d)[i] = v;
        else
            for (int64_t i = 0; i < n; ++i)
                *(flk_i64 *)(d + i * s) = v;
        break;
    }
    }
}

static void fill_tensor(const fl_tensor *t, const flk_scalar *value) {
    fill_ctx c;
    memset(&c, 0, sizeof c);
    c.es = flk_dtype_size(t->dtype);
    if (value->kind == FL_ARG_FLOAT)
        flk_store_f64(c.pattern, t->dtype, value->f);
    else
        flk_store_i64(c.pattern, t->dtype, value->i);
    c.zero = 1;
    for (size_t i = 0; i < c.es; ++i)
        if (c.pattern[i])
            c.zero = 0;
    int64_t strides[1][FLK_MAX_DIMS];
    for (int32_t d = 0; d < t->ndim; ++d)
        strides[0][d] = t->strides[d] * (int64_t)c.es;
    char *p = (char *)flk_data(t);
    flk_for_each_row(t->ndim, t->sizes, 1, &p, strides, 0, fill_row, &c);
}

/* copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> self */
FLK_KERNEL_FN(k_copy_) {
    flk_args a;
    const fl_tensor *self, *dst;
    flk_operand src;
    FLK_TRY(flk_args_init(&a, "copy_", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_operand(&a, 1, "src", &src));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &dst));
    (void)self;
    if (!src.t) {
        fill_tensor(dst, &src.s);
        return FL_SUCCESS;
    }
    if (flk_same_view(dst, src.t))
        return FL_SUCCESS;

    int nd = dst->ndim;
    int64_t strides[2][FLK_MAX_DIMS];
    int64_t des = (int64_t)flk_dtype_size(dst->dtype);
    for (int d = 0; d < nd; ++d) {
        strides[0][d] = dst->strides[d] * des;
        if (dst->sizes[d] > 1 && dst->strides[d] == 0)
            return flk_fail(&a, "the destination has more than one element at the same memory "
                                "location (stride 0 in dim %d)", d);
    }
    FLK_TRY(flk_broadcast_strides(&a, src.t, "src", nd, dst->sizes, strides[1]));
    if (flk_numel(dst) == 0)
        return FL_SUCCESS;

    const fl_tensor *s = src.t;
    void *tmp = NULL;
    fl_tensor tmp_t;
    int64_t tmp_strides[FLK_MAX_DIMS];
    if (flk_may_overlap(dst, s)) {
        /* materialise src contiguously first so that no element is read after
         * it has been overwritten */
        int64_t n = flk_numel(s);
        size_t ses = flk_dtype_size(s->dtype);
        tmp = flk_alloc((size_t)n * ses);
        if (!tmp)
            return flk_fail(&a, "out of host memory for a %lld-element temporary", (long long)n);
        int64_t st[2][FLK_MAX_DIMS];
        int64_t acc = 1;
        for (int d = s->ndim - 1; d >= 0; --d) {
            tmp_strides[d] = acc;
            st[0][d] = acc * (int64_t)ses;
            st[1][d] = s->strides[d] * (int64_t)ses;
            acc *= s->sizes[d];
        }
        char *pp[2] = {(char *)tmp, (char *)flk_data(s)};
        copy_ctx cc = {s->dtype, s->dtype};
        flk_for_each_row(s->ndim, s->sizes, 2, pp, st, 1, copy_row, &cc);
        tmp_t = *s;
        tmp_t.base = (fl_devptr)(uintptr_t)tmp;
        tmp_t.byte_offset = 0;
        tmp_t.strides = tmp_strides;
        s = &tmp_t;
        FLK_TRY(flk_broadcast_strides(&a, s, "src", nd, dst->sizes, strides[1]));
    }
    char *ptrs[2] = {(char *)flk_data(dst), (char *)flk_data(s)};
    copy_ctx c = {dst->dtype, s->dtype};
    if (!copy_tiled(nd, dst->sizes, ptrs, strides, &c))
        flk_for_each_row(nd, dst->sizes, 2, ptrs, strides, 0, copy_row, &c);
    flk_free(tmp);
    return FL_SUCCESS;
}
FLK_REGISTER("copy_", FLK_REAL_TYPES | FLK_FP8_TYPES, k_copy_);

/* fill_.Scalar(Tensor(a!) self, Scalar value) -> self */
FLK_KERNEL_FN(k_fill__scalar) {
    flk_args a;
    const fl_tensor *out;
    flk_scalar v;
    FLK_TRY(flk_args_init(&a, "fill_.Scalar", args, nargs, 3, ctx));
    FLK_TRY(flk_get_scalar(&a, 1, "value", &v));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    fill_tensor(out, &v);
    return FL_SUCCESS;
}
FLK_REGISTER("fill_.Scalar", FLK_REAL_TYPES, k_fill__scalar);

/* zero_(Tensor(a!) self) -> self */
FLK_KERNEL_FN(k_zero_) {
    flk_args a;
    const fl_tensor *out;
    FLK_TRY(flk_args_init(&a, "zero_", args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    flk_scalar z = {FL_ARG_INT, 0.0, 0};
    fill_tensor(out, &z);
    return FL_SUCCESS;
}
FLK_REGISTER("zero_", FLK_REAL_TYPES | FLK_FP8_TYPES, k_zero_);
