/*
 * random.c -- normal_, uniform_, bernoulli_.float, native_dropout and its
 * backward.
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
 * native_dropout keeps an element when u < 1 - p (see its own counter below).
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/pack.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Philox4x32-10 for the counters base .. base + m - 1 (m <= RNG_BLOCK), one
 * lane per counter so the rounds vectorise */
#define RNG_BLOCK 64
static void philox_block(uint64_t base, uint64_t seed, int m, uint32_t *r0, uint32_t *r1,
                         uint32_t *r2, uint32_t *r3) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int j = 0; j < m; ++j) {
        uint64_t cnt = base + (uint64_t)j;
        r0[j] = (uint32_t)cnt;
        r1[j] = (uint32_t)(cnt >> 32);
        r2[j] = 0;
        r3[j] = 0;
    }
    for (int r = 0; r < 10; ++r) {
        for (int j = 0; j < m; ++j) {
            uint64_t p0 = (uint64_t)0xD2511F53u * r0[j];
            uint64_t p1 = (uint64_t)0xCD9E8D57u * r2[j];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ r1[j] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ r3[j] ^ k1;
            r1[j] = (uint32_t)p1;
            r3[j] = (uint32_t)p0;
            r0[j] = n0;
            r2[j] = n2;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Branch-free cos(2*pi*v) (even Taylor polynomial on [0, pi/2] after
 * reduction, a few ulp) so the Box-Muller loop vectorises (with flk_logf); a
 * random number generator needs distribution-level accuracy. */
static inline float rng_cos2pi(float v) { /* v in [0, 1) */
    float w = v - (float)(int32_t)(v + 0.5f); /* [-0.5, 0.5] */
    w = w < 0 ? -w : w;                       /* cos is even */
    int flip = w > 0.25f;
    float w2 = 0.5f - w;                      /* computed outside the select: */
    float t = flip ? w2 : w;                  /* [0, 0.25], angle in [0, pi/2] */
    float x = 6.28318530717958648f * t, z = x * x;
    float c = -1.0f / 87178291200.0f;
    c = c * z + 1.0f / 479001600.0f;
    c = c * z - 1.0f / 3628800.0f;
    c = c * z + 1.0f / 40320.0f;
    c = c * z - 1.0f / 720.0f;
    c = c * z + 1.0f / 24.0f;
    c = c * z - 0.5f;
    c = c * z + 1.0f;
    return flip ? -c : c;
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
    const int64_t s = st[0];
    uint32_t r0[RNG_BLOCK], r1[RNG_BLOCK], r2[RNG_BLOCK], r3[RNG_BLOCK];
    double v[RNG_BLOCK];
    const double lo = c->p0, span = c->p1 - c->p0;
    for (int64_t off = 0; off < n; off += RNG_BLOCK) {
        int m = n - off < RNG_BLOCK ? (int)(n - off) : RNG_BLOCK;
        philox_block(c->counter + (uint64_t)off, c->seed, m, r0, r1, r2, r3);
        if (c->kind == RNG_UNIFORM) {
            if (c->bits53)
                for (int j = 0; j < m; ++j)
                    v[j] = lo + span * u53(r0[j], r1[j]);
            else
                for (int j = 0; j < m; ++j)
                    v[j] = lo + span * ((double)(r0[j] >> 8) * 0x1.0p-24);
        } else if (c->kind == RNG_NORMAL) {
            if (c->bits53) {
                for (int j = 0; j < m; ++j) {
                    double u1 = ((double)((((uint64_t)r0[j] << 32) | r1[j]) >> 11) + 1.0) * 0x1.0p-53;
                    double u2 = u53(r2[j], r3[j]);
                    v[j] = lo + c->p1 * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
                }
            } else {
                /* single precision is plenty for float32/16 outputs (tails to 5.8
                 * sigma); split into loops that vectorise */
                float rad[RNG_BLOCK], cs[RNG_BLOCK];
                for (int j = 0; j < m; ++j) {
                    float u1 = ((float)(r0[j] >> 8) + 1.0f) * 0x1.0p-24f;
                    rad[j] = -2.0f * flk_logf(u1);
                    cs[j] = rng_cos2pi((float)(r2[j] >> 8) * 0x1.0p-24f);
                }
                int j = 0;
#if defined(__AVX__)
                for (; j + 8 <= m; j += 8)
                    _mm256_storeu_ps(rad + j, _mm256_sqrt_ps(_mm256_loadu_ps(rad + j)));
#endif
                for (; j < m; ++j)
                    rad[j] = sqrtf(rad[j]);
                for (j = 0; j < m; ++j)
                    v[j] = lo + c->p1 * (double)(rad[j] * cs[j]);
            }
        } else {
            for (int j = 0; j < m; ++j)
                v[j] = u53(r0[j], r1[j]) < lo ? 1.0 : 0.0;
        }
        char *dd = d + off * s;
        if (c->dt == FL_FLOAT32 && s == 4)
            for (int j = 0; j < m; ++j)
                ((flk_f32 *)dd)[j] = (float)v[j];
        else
            flk_convert(dd, c->dt, s, v, FL_FLOAT64, 8, m);
    }
    c->counter += (uint64_t)n;
}

static fl_status rng_run(const flk_args *a, const fl_tensor *t, rng_ctx *c) {
    int64_t strides[1][FLK_MAX_DIMS];
    int64_t es = (int64_t)flk_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; ++d) {
        strides[0][d] = t->strides[d] * es;
        if (t->sizes[d] > 1 && t->strides[d] == 0)
            return flk_fail(a, "self has more than one element at the same memory location");
    }
    char *p = (char *)flk_data(t);
    /* order_op -1: logical order, so the counter follows the logical index */
    flk_for_each_row(t->ndim, t->sizes, 1, &p, strides, -1, rng_row, c);
    return FL_SUCCESS;
}

/* normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None) */
FLK_KERNEL_FN(k_normal_) {
    flk_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "normal_", args, nargs, 5, ctx));
    FLK_TRY(flk_get_double(&a, 1, "mean", &c.p0));
    FLK_TRY(flk_get_double(&a, 2, "std", &c.p1));
    FLK_TRY(flk_get_generator(&a, 3, "generator", &c.seed, &c.counter));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &t));
    if (!flk_is_floating(t->dtype))
        return flk_fail(&a, "dtype %s is not supported (floating types only)",
                        flk_dtype_name(t->dtype));
    if (!(c.p1 >= 0.0))
        return flk_fail(&a, "normal expects std >= 0.0, but found std %g", c.p1);
    c.kind = RNG_NORMAL;
    c.dt = t->dtype;
    c.bits53 = t->dtype == FL_FLOAT64;
    return rng_run(&a, t, &c);
}
FLK_REGISTER("normal_", FLK_FLOAT_TYPES, k_normal_);

/* uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None) */
FLK_KERNEL_FN(k_uniform_) {
    flk_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "uniform_", args, nargs, 5, ctx));
    FLK_TRY(flk_get_double(&a, 1, "from", &c.p0));
    FLK_TRY(flk_get_double(&a, 2, "to", &c.p1));
    FLK_TRY(flk_get_generator(&a, 3, "generator", &c.seed, &c.counter));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &t));
    if (!flk_is_floating(t->dtype))
        return flk_fail(&a, "dtype %s is not supported (floating types only)",
                        flk_dtype_name(t->dtype));
    if (!(c.p0 <= c.p1))
        return flk_fail(&a, "uniform_ expects to return a [from, to) range, but found from=%g > "
                            "to=%g", c.p0, c.p1);
    c.kind = RNG_UNIFORM;
    c.dt = t->dtype;
    c.bits53 = t->dtype == FL_FLOAT64;
    return rng_run(&a, t, &c);
}
FLK_REGISTER("uniform_", FLK_FLOAT_TYPES, k_uniform_);

/* bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) */
FLK_KERNEL_FN(k_bernoulli__float) {
    flk_args a;
    const fl_tensor *t;
    rng_ctx c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "bernoulli_.float", args, nargs, 4, ctx));
    FLK_TRY(flk_get_double(&a, 1, "p", &c.p0));
    FLK_TRY(flk_get_generator(&a, 2, "generator", &c.seed, &c.counter));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &t));
    if (!(c.p0 >= 0.0 && c.p0 <= 1.0))
        return flk_fail(&a, "bernoulli_ expects p to be in [0, 1], but got p=%g", c.p0);
    c.kind = RNG_BERNOULLI;
    c.dt = t->dtype;
    return rng_run(&a, t, &c);
}
FLK_REGISTER("bernoulli_.float", FLK_REAL_TYPES, k_bernoulli__float);

/* ---- dropout ------------------------------------------------------------------- */

/* native_dropout's schema has no Generator, so the runtime passes no (seed,
 * offset): the chip draws from its own counter stream, advanced atomically by
 * every call (distinct masks per call; not reset by torch.manual_seed). */
#define DROPOUT_SEED UINT64_C(0x5DEECE66D2545F49)
static uint64_t dropout_counter;

typedef struct dropout_job {
    const double *x;
    double *y;
    uint8_t *mask;
    int64_t n;
    double keep, scale;
    uint64_t seed, counter;
} dropout_job;

static void dropout_fill(const dropout_job *j) {
    uint32_t r0[RNG_BLOCK], r1[RNG_BLOCK], r2[RNG_BLOCK], r3[RNG_BLOCK];
    for (int64_t off = 0; off < j->n; off += RNG_BLOCK) {
        int m = j->n - off < RNG_BLOCK ? (int)(j->n - off) : RNG_BLOCK;
        philox_block(j->counter + (uint64_t)off, j->seed, m, r0, r1, r2, r3);
        for (int k = 0; k < m; ++k) {
            const uint8_t keep = u53(r0[k], r1[k]) < j->keep;
            j->mask[off + k] = keep;
            /* x * 0 rather than 0: a dropped NaN or inf stays NaN and -x gives -0, as on CPU */
            j->y[off + k] = j->x[off + k] * (keep ? j->scale : 0.0);
        }
    }
}

/* native_dropout(input, p, train?) -> (output, mask) */
FLK_KERNEL_FN(k_native_dropout) {
    flk_args a;
    const fl_tensor *x, *y, *mask;
    double p;
    int train = 1; /* train=None means training */
    FLK_TRY(flk_args_init(&a, "native_dropout", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_double(&a, 1, "p", &p));
    if (!flk_arg_is_none(&a, 2))
        FLK_TRY(flk_get_bool(&a, 2, "train", &train));
    FLK_TRY(flk_get_tensor(&a, 3, "output", &y));
    FLK_TRY(flk_get_tensor(&a, 4, "mask", &mask));
    FLK_TRY(flk_check_dtype(&a, x, "input", FLK_FLOAT_TYPES));
    if (!(p >= 0.0 && p <= 1.0))
        return flk_fail(&a, "dropout probability has to be between 0 and 1, but got %g", p);
    if (mask->dtype != FL_BOOL)
        return flk_fail(&a, "mask must be bool, got %s", flk_dtype_name(mask->dtype));
    const int64_t n = flk_numel(x);
    const int training = train;
    dropout_job j = {.n = n, .keep = training ? 1.0 - p : 1.0,
                     .scale = !training ? 1.0 : (p < 1.0 ? 1.0 / (1.0 - p) : 0.0),
                     .seed = DROPOUT_SEED ^ (uint64_t)ctx->device,
                     .counter = __atomic_fetch_add(&dropout_counter, (uint64_t)n,
                                                   __ATOMIC_RELAXED)};
    void *buf[3] = {0};
    fl_status st = ref_pack(&a, x, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, n, (double **)&buf[1]);
    if (st == FL_SUCCESS && !(buf[2] = flk_alloc((size_t)n)))
        st = flk_fail(&a, "out of host memory for a %lld-element mask", (long long)n);
    if (st == FL_SUCCESS) {
        j.x = buf[0], j.y = buf[1], j.mask = buf[2];
        dropout_fill(&j);
        ref_unpack(y, FL_FLOAT64, buf[1]);
        ref_unpack(mask, FL_BOOL, buf[2]);
    }
    ref_free_all(buf, 3);
    return st;
}
FLK_REGISTER("native_dropout", FLK_FLOAT_TYPES, k_native_dropout);

/* native_dropout_backward(grad_output, mask, scale): grad * mask * scale, on
 * the elementwise engine */
FLK_DEF2_F(l_masked_scale, const T s = FLK_PARAM(T, 0);, a * b * s)
FLK_KERNEL_FN(k_native_dropout_backward) {
    flk_args a;
    flk_ew_call c;
    memset(&c, 0, sizeof c);
    FLK_TRY(flk_args_init(&a, "native_dropout_backward", args, nargs, 4, ctx));
    FLK_TRY(flk_get_operand(&a, 0, "grad_output", &c.in[0]));
    FLK_TRY(flk_get_operand(&a, 1, "self", &c.in[1]));
    FLK_TRY(flk_get_scalar(&a, 2, "scale", &c.params[0]));
    c.param_names[0] = "scale";
    /* PyTorch converts the scale to an integral mask's dtype (truncating) */
    const fl_tensor *mask = c.in[1].t;
    flk_scalar *s = &c.params[0];
    if (mask && flk_is_integral(mask->dtype) && s->kind == FL_ARG_FLOAT)
        *s = (flk_scalar){FL_ARG_INT, trunc(s->f), flk_double_to_i64(s->f)};
    FLK_TRY(flk_get_tensor(&a, 3, "out", &c.out));
    c.nin = 2;
    c.nparams = 1;
    return flk_ew_run(&a, FLK_LOOPS_F(l_masked_scale), FLK_EW_NO_BOOL, &c);
}
FLK_REGISTER("native_dropout_backward", FLK_FLOAT_TYPES, k_native_dropout_backward);
