/*
 * reduce.c -- sum / mean (all dims or a dim list, keepdim, dtype),
 * argmax (flattened or along a dim), max / min over all elements.
 *
 * Sums accumulate in double for floating inputs or outputs and in int64 for
 * integral/bool ones (so int/bool inputs give PyTorch's int64 sum).  The
 * input is traversed in memory order; each output's accumulator sits in a
 * small contiguous buffer that is written to the output at the end.
 */
#include <math.h>
#include <stdlib.h>

#include "fl_kernel.h"
#include "util/reduce_dims.h"

/* ---- sum / mean ------------------------------------------------------------ */

typedef struct sum_ctx {
    int32_t in_dt;
    int int_acc;
} sum_ctx;

/* contiguous float32 row: 16 float lanes over blocks of 1024 elements (each
 * lane adds at most 64 values), blocks combined in double; vectorisable */
static double row_sum_f32(const char *p, int64_t s, int64_t n) {
    double total = 0.0;
    if (s == 4) {
        const flk_f32 *x = (const flk_f32 *)p;
        int64_t i = 0;
        while (i + 16 <= n) {
            float acc[16] = {0};
            int64_t end = i + 1024 <= n ? i + 1024 : n - (n - i) % 16;
            for (; i < end; i += 16)
                for (int l = 0; l < 16; ++l)
                    acc[l] += x[i + l];
            double b = 0.0;
            for (int l = 0; l < 16; ++l)
                b += acc[l];
            total += b;
        }
        for (; i < n; ++i)
            total += x[i];
        return total;
    }
    double s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += *(const flk_f32 *)(p + i * s);
        s1 += *(const flk_f32 *)(p + (i + 1) * s);
    }
    for (; i < n; ++i)
        s0 += *(const flk_f32 *)(p + i * s);
    return total + s0 + s1;
}

static double row_sum_f64(const char *p, int64_t s, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    if (s == 8) {
        const flk_f64 *x = (const flk_f64 *)p;
        for (; i + 4 <= n; i += 4) {
            s0 += x[i];
            s1 += x[i + 1];
            s2 += x[i + 2];
            s3 += x[i + 3];
        }
        for (; i < n; ++i)
            s0 += x[i];
    } else {
        for (; i < n; ++i)
            s0 += *(const flk_f64 *)(p + i * s);
    }
    return (s0 + s1) + (s2 + s3);
}

/* p[0]: accumulator (double or int64), p[1]: input */
static void sum_row(char **p, const int64_t *st, int64_t n, void *vc) {
    const sum_ctx *c = (const sum_ctx *)vc;
    char *acc = p[0];
    const char *x = p[1];
    int64_t as = st[0], xs = st[1];
    if (c->int_acc) {
        if (as == 0) {
            uint64_t s = 0;
            for (int64_t i = 0; i < n; ++i)
                s += (uint64_t)flk_load_i64(x + i * xs, c->in_dt);
            *(int64_t *)acc = (int64_t)((uint64_t) * (int64_t *)acc + s);
        } else {
            for (int64_t i = 0; i < n; ++i) {
                int64_t *ap = (int64_t *)(acc + i * as);
                *ap = (int64_t)((uint64_t)*ap + (uint64_t)flk_load_i64(x + i * xs, c->in_dt));
            }
        }
        return;
    }
    if (as == 0) {
        double s;
        if (c->in_dt == FL_FLOAT32)
            s = row_sum_f32(x, xs, n);
        else if (c->in_dt == FL_FLOAT64)
            s = row_sum_f64(x, xs, n);
        else {
            s = 0;
            for (int64_t i = 0; i < n; ++i)
                s += flk_load_f64(x + i * xs, c->in_dt);
        }
        *(double *)acc += s;
        return;
    }
    if (c->in_dt == FL_FLOAT32 && as == 8) {
        double *ap = (double *)acc;
        if (xs == 4) {
            const flk_f32 *xp = (const flk_f32 *)x;
            for (int64_t i = 0; i < n; ++i)
                ap[i] += xp[i];
        } else {
            for (int64_t i = 0; i < n; ++i)
                ap[i] += *(const flk_f32 *)(x + i * xs);
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        *(double *)(acc + i * as) += flk_load_f64(x + i * xs, c->in_dt);
}

/* Reduce `in` over the dims flagged in rmask into `out` (keepdim or not). */
static fl_status sum_impl(const flk_args *a, const fl_tensor *in, const uint8_t *rmask,
                          const fl_tensor *out, int mean) {
    int nd = in->ndim;
    int64_t kept_sizes[FLK_MAX_DIMS];
    int kept_dims[FLK_MAX_DIMS];
    int nk = 0;
    int64_t K = 1, count = 1;
    for (int d = 0; d < nd; ++d) {
        if (rmask[d]) {
            count *= in->sizes[d];
        } else {
            kept_dims[nk] = d;
            kept_sizes[nk++] = in->sizes[d];
            K *= in->sizes[d];
        }
    }
    if (flk_numel(out) != K)
        return flk_fail(a, "output has %lld elements, expected %lld",
                        (long long)flk_numel(out), (long long)K);
    if (!(out->ndim == nd || out->ndim == nk))
        return flk_fail(a, "output has %d dims, expected %d (keepdim) or %d", (int)out->ndim,
                        nd, nk);
    if (mean && !flk_is_floating(out->dtype))
        return flk_fail(a, "mean needs a floating output dtype, got %s",
                        flk_dtype_name(out->dtype));
    int int_acc = !flk_is_floating(in->dtype) && !flk_is_floating(out->dtype);
    if (K == 0)
        return FL_SUCCESS;

    void *acc = calloc((size_t)K, 8);
    if (!acc)
        return flk_fail(a, "out of host memory for %lld accumulators", (long long)K);

    if (count > 0) {
        int64_t strides[2][FLK_MAX_DIMS];
        int64_t es = (int64_t)flk_dtype_size(in->dtype);
        int64_t run = 8;
        for (int d = nd - 1; d >= 0; --d) {
            strides[1][d] = in->strides[d] * es;
            if (rmask[d]) {
                strides[0][d] = 0;
            } else {
                strides[0][d] = run;
                run *= in->sizes[d];
            }
        }
        char *ptrs[2] = {(char *)acc, (char *)flk_data(in)};
        sum_ctx c = {in->dtype, int_acc};
        flk_for_each_row(nd, in->sizes, 2, ptrs, strides, 1, sum_row, &c);
    }

    /* write the accumulators (kept dims in order) to out */
    int64_t ostr[FLK_MAX_DIMS];
    int64_t oes = (int64_t)flk_dtype_size(out->dtype);
    for (int k = 0; k < nk; ++k)
        ostr[k] = (out->ndim == nd ? out->strides[kept_dims[k]] : out->strides[k]) * oes;
    int64_t idx[FLK_MAX_DIMS] = {0};
    char *o = (char *)flk_data(out);
    for (int64_t j = 0; j < K; ++j) {
        if (int_acc) {
            flk_store_i64(o, out->dtype, ((int64_t *)acc)[j]);
        } else {
            double v = ((double *)acc)[j];
            if (mean)
                v = v / (double)count;
            flk_store_f64(o, out->dtype, v);
        }
        for (int k = nk - 1; k >= 0; --k) {
            o += ostr[k];
            if (++idx[k] < kept_sizes[k])
                break;
            o -= ostr[k] * kept_sizes[k];
            idx[k] = 0;
        }
    }
    free(acc);
    return FL_SUCCESS;
}

static fl_status sum_all(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                         int mean) {
    flk_args a;
    const fl_tensor *in, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    uint8_t rmask[FLK_MAX_DIMS];
    memset(rmask, 1, sizeof rmask);
    return sum_impl(&a, in, rmask, out, mean);
}

static fl_status sum_dims(const char *op, const fl_arg *args, uint32_t nargs, flk_ctx *ctx,
                          int mean) {
    flk_args a;
    const fl_tensor *in, *out;
    int keepdim;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_bool(&a, 2, "keepdim", &keepdim));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &out));
    uint8_t rmask[FLK_MAX_DIMS];
    FLK_TRY(ref_reduce_dim_mask(&a, in, 1, rmask));
    return sum_impl(&a, in, rmask, out, mean);
}

FLK_KERNEL_FN(k_sum) { return sum_all("sum", args, nargs, ctx, 0); }
FLK_REGISTER("sum", FLK_REAL_TYPES, k_sum);
FLK_KERNEL_FN(k_mean) { return sum_all("mean", args, nargs, ctx, 1); }
FLK_REGISTER("mean", FLK_FLOAT_TYPES, k_mean);
FLK_KERNEL_FN(k_sum_dim) { return sum_dims("sum.dim_IntList", args, nargs, ctx, 0); }
FLK_REGISTER("sum.dim_IntList", FLK_REAL_TYPES, k_sum_dim);
FLK_KERNEL_FN(k_mean_dim) { return sum_dims("mean.dim", args, nargs, ctx, 1); }
FLK_REGISTER("mean.dim", FLK_FLOAT_TYPES, k_mean_dim);

/* sum.IntList_out(self, dim, keepdim, *, dtype, out): the runtime has already
 * resized `out` to the result's shape (PyTorch's resize_output) */
FLK_KERNEL_FN(sum_intlist_out) { return sum_dims("sum.IntList_out", args, nargs, ctx, 0); }
FLK_KERNEL_FN(k_sum_intlist_out) {
    return flk_out_variant("sum.IntList_out", args, nargs, ctx, sum_intlist_out);
}
FLK_REGISTER("sum.IntList_out", FLK_REAL_TYPES, k_sum_intlist_out);

/* ---- max / min over everything -------------------------------------------------- */

typedef struct mm_ctx {
    int32_t dt;
    int is_max;
    int seen;
    int is_float;
    double fv;
    int64_t iv;
} mm_ctx;

static void minmax_row(char **p, const int64_t *st, int64_t n, void *vc) {
    mm_ctx *c = (mm_ctx *)vc;
    const char *x = p[0];
    int64_t s = st[0];
    if (c->is_float) {
        double best = c->seen ? c->fv : flk_load_f64(x, c->dt);
        if (best != best) {
            c->seen = 1;
            c->fv = best;
            return;
        }
        if (c->dt == FL_FLOAT32) {
            float b = (float)best;
            for (int64_t i = 0; i < n; ++i) {
                float v = *(const flk_f32 *)(x + i * s);
                if (v != v) {
                    b = v;
                    break;
                }
                if (c->is_max ? v > b : v < b)
                    b = v;
            }
            best = b;
        } else {
            for (int64_t i = 0; i < n; ++i) {
                double v = flk_load_f64(x + i * s, c->dt);
                if (v != v) {
                    best = v;
                    break;
                }
                if (c->is_max ? v > best : v < best)
                    best = v;
            }
        }
        c->fv = best;
    } else {
        int64_t best = c->seen ? c->iv : flk_load_i64(x, c->dt);
        for (int64_t i = 0; i < n; ++i) {
            int64_t v = flk_load_i64(x + i * s, c->dt);
            if (c->is_max ? v > best : v < best)
                best = v;
        }
        c->iv = best;
    }
    c->seen = 1;
}

static fl_status minmax_all(const char *op, const fl_arg *args, uint32_t nargs,
                            flk_ctx *ctx, int is_max) {
    flk_args a;
    const fl_tensor *in, *out;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 2, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_tensor(&a, 1, "out", &out));
    if (flk_numel(in) == 0)
        return flk_fail(&a, "expected reduction dim to be specified for input.numel() == 0");
    if (flk_numel(out) != 1)
        return flk_fail(&a, "output must have one element");
    mm_ctx c = {in->dtype, is_max, 0, flk_is_floating(in->dtype), 0.0, 0};
    int64_t strides[1][FLK_MAX_DIMS];
    int64_t es = (int64_t)flk_dtype_size(in->dtype);
    for (int d = 0; d < in->ndim; ++d)
        strides[0][d] = in->strides[d] * es;
    char *p = (char *)flk_data(in);
    flk_for_each_row(in->ndim, in->sizes, 1, &p, strides, 0, minmax_row, &c);
    if (c.is_float)
        flk_store_f64(flk_data(out), out->dtype, c.fv);
    else
        flk_store_i64(flk_data(out), out->dtype, c.iv);
    return FL_SUCCESS;
}

FLK_KERNEL_FN(k_max) { return minmax_all("max", args, nargs, ctx, 1); }
FLK_REGISTER("max", FLK_REAL_TYPES, k_max);
FLK_KERNEL_FN(k_min) { return minmax_all("min", args, nargs, ctx, 0); }
FLK_REGISTER("min", FLK_REAL_TYPES, k_min);

/* ---- argmax ------------------------------------------------------------------------ */

/* first index of the maximum; a NaN counts as the maximum (first NaN wins) */
typedef struct am_state {
    int is_float;
    int seen;
    double fv;
    int64_t iv;
    int64_t idx;
} am_state;

static inline void am_push(am_state *s, const char *p, int32_t dt, int64_t index) {
    if (s->is_float) {
        double v = flk_load_f64(p, dt);
        if (!s->seen) {
            s->seen = 1;
            s->fv = v;
            s->idx = index;
            return;
        }
        if (s->fv != s->fv)
            return;
        if (v != v || v > s->fv) {
            s->fv = v;
            s->idx = index;
        }
    } else {
        int64_t v = flk_load_i64(p, dt);
        if (!s->seen || v > s->iv) {
            s->seen = 1;
            s->iv = v;
            s->idx = index;
        }
    }
}

/* typed scan of a float32 run with the same rule as am_push */
static inline void am_run_f32(am_state *s, const char *p, int64_t stride, int64_t n,
                              int64_t base) {
    int64_t j = 0;
    if (!s->seen && n > 0) {
        s->seen = 1;
        s->fv = *(const flk_f32 *)p;
        s->idx = base;
        j = 1;
    }
    if (s->fv != s->fv)
        return;
    float best = (float)s->fv;
    int64_t bi = s->idx;
    for (; j < n; ++j) {
        float v = *(const flk_f32 *)(p + j * stride);
        if (v > best) {
            best = v;
            bi = base + j;
        } else if (v != v) {
            best = v;
            bi = base + j;
            break;
        }
    }
    s->fv = best;
    s->idx = bi;
}

typedef struct am_flat_ctx {
    am_state s;
    int32_t dt;
    int64_t counter;
} am_flat_ctx;

static void am_flat_row(char **p, const int64_t *st, int64_t n, void *vc) {
    am_flat_ctx *c = (am_flat_ctx *)vc;
    if (c->dt == FL_FLOAT32)
        am_run_f32(&c->s, p[0], st[0], n, c->counter);
    else
        for (int64_t i = 0; i < n; ++i)
            am_push(&c->s, p[0] + i * st[0], c->dt, c->counter + i);
    c->counter += n;
}

typedef struct am_dim_ctx {
    int32_t dt;
    int is_float;
    int64_t len, stride; /* along the reduced dim, bytes */
} am_dim_ctx;

static void am_dim_row(char **p, const int64_t *st, int64_t n, void *vc) {
    const am_dim_ctx *c = (const am_dim_ctx *)vc;
    for (int64_t i = 0; i < n; ++i) {
        const char *x = p[0] + i * st[0];
        am_state s = {c->is_float, 0, 0.0, 0, 0};
        if (c->dt == FL_FLOAT32)
            am_run_f32(&s, x, c->stride, c->len, 0);
        else
            for (int64_t j = 0; j < c->len; ++j)
                am_push(&s, x + j * c->stride, c->dt, j);
        *(flk_i64 *)(p[1] + i * st[1]) = s.idx;
    }
}

/* argmax(Tensor self, int? dim=None, bool keepdim=False) */
FLK_KERNEL_FN(k_argmax) {
    flk_args a;
    const fl_tensor *in, *out;
    int has_dim, keepdim;
    int64_t dim = 0;
    FLK_TRY(flk_args_init(&a, "argmax", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &in));
    FLK_TRY(flk_get_opt_int(&a, 1, "dim", &has_dim, &dim));
    FLK_TRY(flk_get_bool(&a, 2, "keepdim", &keepdim));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (in->dtype == FL_BOOL)
        return flk_fail(&a, "bool input is not supported");
    if (out->dtype != FL_INT64)
        return flk_fail(&a, "output must be int64, got %s", flk_dtype_name(out->dtype));
    int64_t es = (int64_t)flk_dtype_size(in->dtype);
    int is_float = flk_is_floating(in->dtype);

    if (!has_dim || in->ndim == 0) {
        if (has_dim) {
            int32_t d;
            FLK_TRY(flk_wrap_dim(&a, dim, in->ndim, &d));
        }
        if (flk_numel(in) == 0)
            return flk_fail(&a, "expected reduction dim to be specified for input.numel() == 0");
        if (flk_numel(out) != 1)
            return flk_fail(&a, "output must have one element");
        am_flat_ctx c;
        memset(&c, 0, sizeof c);
        c.s.is_float = is_float;
        c.dt = in->dtype;
        int64_t strides[1][FLK_MAX_DIMS];
        for (int d = 0; d < in->ndim; ++d)
            strides[0][d] = in->strides[d] * es;
        char *p = (char *)flk_data(in);
        flk_for_each_row(in->ndim, in->sizes, 1, &p, strides, -1, am_flat_row, &c);
        *(flk_i64 *)flk_data(out) = c.s.idx;
        return FL_SUCCESS;
    }

    int32_t rd;
    FLK_TRY(flk_wrap_dim(&a, dim, in->ndim, &rd));
    if (in->sizes[rd] == 0)
        return flk_fail(&a, "expected reduction dim %d to have non-zero size", (int)rd);
    int nd = in->ndim;
    int64_t sizes[FLK_MAX_DIMS];
    int64_t strides[2][FLK_MAX_DIMS];
    int64_t expected = 1;
    for (int d = 0; d < nd; ++d) {
        sizes[d] = d == rd ? 1 : in->sizes[d];
        expected *= sizes[d];
        strides[0][d] = in->strides[d] * es;
    }
    if (flk_numel(out) != expected || !(out->ndim == nd || out->ndim == nd - 1))
        return flk_fail(&a, "output shape does not match the reduction");
    for (int d = 0, k = 0; d < nd; ++d) {
        if (out->ndim == nd) {
            strides[1][d] = out->strides[d] * 8;
        } else if (d == rd) {
            strides[1][d] = 0;
        } else {
            strides[1][d] = out->strides[k++] * 8;
        }
    }
    am_dim_ctx c = {in->dtype, is_float, in->sizes[rd], in->strides[rd] * es};
    char *ptrs[2] = {(char *)flk_data(in), (char *)flk_data(out)};
    flk_for_each_row(nd, sizes, 2, ptrs, strides, 0, am_dim_row, &c);
    (void)keepdim;
    return FL_SUCCESS;
}
FLK_REGISTER("argmax", FLK_NUM_TYPES, k_argmax);
