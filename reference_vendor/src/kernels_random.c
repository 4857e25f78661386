/*
 * kernels_random.c -- normal_, uniform_, bernoulli_.float.
 *
 * Counter-based: element i (row-major logical index over self's shape,
 * independent of its strides) takes the four 32-bit words of
 * Philox4x32-10(key = seed, counter = {lo, hi} of (offset + i), 0, 0).
 * A call therefore consumes counters offset .. offset + numel - 1, and the
 * runtime should advance the generator's offset by numel.  Results depend
 * only on (seed, offset, index).  A missing generator means seed 0, offset 0.
 *   uniform:   from + (to - from) * u, u in [0, 1) with 24 random bits for
 *              float32/float16/bfloat16 and 53 for float64
 *   normal:    mean + std * sqrt(-2 ln u1) * cos(2 pi u2)   (Box-Muller; in
 *              double with 53-bit u1, u2 for float64, in float with 24-bit
 *              ones otherwise)
 *   bernoulli: u < p ? 1 : 0 (u with 53 bits), any dtype
 */
#include <math.h>

#include "kernel_util.h"

static inline void philox4x32_10(uint64_t counter, uint64_t seed, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

enum { RNG_UNIFORM, RNG_NORMAL, RNG_BERNOULLI };

typedef struct rng_ctx {
    int kind;
    int32_t dt;
    int bits53;
    uint64_t seed, counter;
    double p0, p1; /* uniform: from, to; normal: mean, std; bernoulli: p */
} rng_ctx;

static inline double u53(uint32_t hi, uint32_t lo) {
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

static void rng_row(char **p, const int64_t *st, int64_t n, void *vc) {
    rng_ctx *c = (rng_ctx *)vc;
    char *d = p[0];
    int64_t s = st[0];
    uint32_t r[4];
    for (int64_t i = 0; i < n; ++i) {
        philox4x32_10(c->counter + (uint64_t)i, c->seed, r);
        double v;
        if (c->kind == RNG_UNIFORM) {
            double u = c->bits53 ? u53(r[0], r[1]) : (double)(r[0] >> 8) * 0x1.0p-24;
            v = c->p0 + (c->p1 - c->p0) * u;
        } else if (c->kind == RNG_NORMAL) {
            if (c->bits53) {
                double u1 = ((double)((((uint64_t)r[0] << 32) | r[1]) >> 11) + 1.0) * 0x1.0p-53;
                double u2 = u53(r[2], r[3]);
                v = c->p0 + c->p1 * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            } else {
                /* single precision is plenty for float32/16 outputs (tails to 6.6 sigma) */
                float u1 = ((float)(r[0] >> 8) + 1.0f) * 0x1.0p-24f;
                float u2 = (float)(r[2] >> 8) * 0x1.0p-24f;
                float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
                v = c->p0 + c->p1 * (double)z;
            }
        } else {
            v = u53(r[0], r[1]) < c->p0 ? 1.0 : 0.0;
        }
        if (c->dt == FL_FLOAT32)
            *(ref_f32 *)(d + i * s) = (float)v;
        else
            ref_store_f64(d + i * s, c->dt, v);
    }
    c->counter += (uint64_t)n;
}

static fl_status rng_run(const ref_args *a, const fl_tensor *t, rng_ctx *c) {
    int64_t strides[1][REF_MAX_DIMS];
    int64_t es = (int64_t)ref_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; ++d) {
        strides[0][d] = t->strides[d] * es;
        if (t->sizes[d] > 1 && t->strides[d] == 0)
            return ref_fail(a, "self has more than one element at the same memory location");
    }
    char *p = (char *)ref_tensor_data(t);
    /* order_op -1: logical order, so the counter follows the logical index */
    ref_for_each_row(t->ndim, t->sizes, 1, &p, strides, -1, rng_row, c);
    return FL_SUCCESS;
}

/* normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None) */
REF_KERNEL(ref_k_normal_) {
    ref_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "normal_", args, nargs, 5, ctx));
    REF_TRY(ref_get_double(&a, 1, "mean", &c.p0));
    REF_TRY(ref_get_double(&a, 2, "std", &c.p1));
    REF_TRY(ref_get_generator(&a, 3, "generator", &c.seed, &c.counter));
    REF_TRY(ref_get_tensor(&a, 4, "out", &t));
    if (!ref_is_floating(t->dtype))
        return ref_fail(&a, "dtype %s is not supported (floating types only)",
                        ref_dtype_name(t->dtype));
    if (!(c.p1 >= 0.0))
        return ref_fail(&a, "normal expects std >= 0.0, but found std %g", c.p1);
    c.kind = RNG_NORMAL;
    c.dt = t->dtype;
    c.bits53 = t->dtype == FL_FLOAT64;
    return rng_run(&a, t, &c);
}

/* uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None) */
REF_KERNEL(ref_k_uniform_) {
    ref_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "uniform_", args, nargs, 5, ctx));
    REF_TRY(ref_get_double(&a, 1, "from", &c.p0));
    REF_TRY(ref_get_double(&a, 2, "to", &c.p1));
    REF_TRY(ref_get_generator(&a, 3, "generator", &c.seed, &c.counter));
    REF_TRY(ref_get_tensor(&a, 4, "out", &t));
    if (!ref_is_floating(t->dtype))
        return ref_fail(&a, "dtype %s is not supported (floating types only)",
                        ref_dtype_name(t->dtype));
    if (!(c.p0 <= c.p1))
        return ref_fail(&a, "uniform_ expects to return a [from, to) range, but found from=%g > "
                            "to=%g", c.p0, c.p1);
    c.kind = RNG_UNIFORM;
    c.dt = t->dtype;
    c.bits53 = t->dtype == FL_FLOAT64;
    return rng_run(&a, t, &c);
}

/* bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) */
REF_KERNEL(ref_k_bernoulli__float) {
    ref_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    REF_TRY(ref_args_init(&a, "bernoulli_.float", args, nargs, 4, ctx));
    REF_TRY(ref_get_double(&a, 1, "p", &c.p0));
    REF_TRY(ref_get_generator(&a, 2, "generator", &c.seed, &c.counter));
    REF_TRY(ref_get_tensor(&a, 3, "out", &t));
    if (!(c.p0 >= 0.0 && c.p0 <= 1.0))
        return ref_fail(&a, "bernoulli_ expects p to be in [0, 1], but got p=%g", c.p0);
    c.kind = RNG_BERNOULLI;
    c.dt = t->dtype;
    return rng_run(&a, t, &c);
}
