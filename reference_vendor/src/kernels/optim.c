/*
 * optim.c -- PyTorch's fused optimizer steps: _fused_adam_, _fused_adamw_
 * and _fused_sgd_ (torch.optim.Adam/AdamW/SGD with fused=True).  One launch
 * updates every parameter of a (device, dtype) group in place; the step
 * counters were already incremented by the caller (_foreach_add_), as on CPU.
 *
 * The arithmetic follows ATen's CPU kernels (FusedAdamKernel.cpp,
 * FusedSGDKernel.cpp), in the tensor's own precision, GradScaler's grad_scale and
 * found_inf included.
 */
#include <math.h>

#include "fl_kernel.h"

/* the element at row-major position i of t (any strides) */
#define ELEM(T, t, i) (*(T *)flk_element((t), (t), (i)))

typedef struct adam_hyper {
    double lr, beta1, beta2, weight_decay, eps;
    int amsgrad, maximize, decoupled; /* decoupled: AdamW's weight decay */
    int has_scale;                    /* GradScaler's grad_scale: grads are divided by it, in place */
    float scale;
} adam_hyper;

/* the lists every Adam entry k reads: param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step */
typedef struct adam_lists {
    const fl_tensor *const *p, *const *g, *const *m, *const *v, *const *vmax, *const *step;
    uint32_t n;
} adam_lists;

#define ADAM_UPDATE(T)                                                                       \
    static void adam_update_##T(const adam_lists *L, uint32_t k, const adam_hyper *h,        \
                                double step) {                                               \
        const fl_tensor *p = L->p[k];                                                        \
        const T beta1 = (T)h->beta1, beta2 = (T)h->beta2;                                    \
        const T wd = (T)h->weight_decay;                                                     \
        /* 1 - beta in double, then rounded: (T)1 - (T)beta2 is 4.7e-5 off for 0.999 */      \
        const T one_minus_beta1 = (T)(1 - h->beta1), one_minus_beta2 = (T)(1 - h->beta2);    \
        const double eps = h->eps;                                                           \
        const double step_size = h->lr / (1 - pow(h->beta1, step));                          \
        const double bias2_sqrt = sqrt(1 - pow(h->beta2, step));                             \
        const int64_t n = flk_numel(p);                                                      \
        for (int64_t i = 0; i < n; ++i) {                                                    \
            T param = ELEM(T, p, i), grad = ELEM(T, L->g[k], i);                             \
            if (h->has_scale) { /* unscaled and written back, as ATen's CPU kernel does */    \
                grad = grad / (T)h->scale;                                                   \
                ELEM(T, L->g[k], i) = grad;                                                  \
            }                                                                                \
            if (h->maximize)                                                                 \
                grad = -grad;                                                                \
            if (wd != 0) {                                                                   \
                if (h->decoupled)                                                            \
                    param = (T)(param * (1 - h->lr * h->weight_decay));                      \
                else                                                                         \
                    grad += param * wd;                                                      \
            }                                                                                \
            T m = ELEM(T, L->m[k], i);                                                       \
            if (fabs(1 - h->beta1) < 0.5) /* lerp(m, grad, 1 - beta1), as ATen computes it */ \
                m = m + one_minus_beta1 * (grad - m);                                        \
            else                                                                             \
                m = grad - (grad - m) * beta1;                                               \
            T v = ELEM(T, L->v[k], i) * beta2 + one_minus_beta2 * grad * grad;               \
            T denom;                                                                         \
            if (h->amsgrad) {                                                                \
                T vmax = ELEM(T, L->vmax[k], i);                                             \
                vmax = vmax > v ? vmax : v;                                                  \
                ELEM(T, L->vmax[k], i) = vmax;                                               \
                denom = (T)(sqrt(vmax) / bias2_sqrt + eps);                                    \
            } else {                                                                         \
                denom = (T)(sqrt(v) / bias2_sqrt + eps);                                       \
            }                                                                                \
            ELEM(T, L->m[k], i) = m;                                                         \
            ELEM(T, L->v[k], i) = v;                                                         \
            ELEM(T, p, i) = (T)(param - step_size * m / denom);                           \
        }                                                                                    \
    }
ADAM_UPDATE(float)
ADAM_UPDATE(double)

/* every list entry k: same dtype (float32/float64) and sizes as the parameter */
static fl_status check_entry(const flk_args *a, const fl_tensor *p, const fl_tensor *t,
                             const char *what, uint32_t k) {
    if (t->dtype != p->dtype)
        return flk_decline(a, "%s[%u] is %s, the parameter %s: one dtype per launch", what, k,
                           flk_dtype_name(t->dtype), flk_dtype_name(p->dtype));
    if (!flk_same_sizes(t, p))
        return flk_fail(a, "%s[%u] has a different shape from params[%u]", what, k, k);
    return FL_SUCCESS;
}

static fl_status read_list(const flk_args *a, uint32_t i, const char *name, uint32_t n,
                           const fl_tensor *const **out) {
    uint32_t count;
    FLK_TRY(flk_get_tensor_list(a, i, name, 0, out, &count));
    if (count != n)
        return flk_fail(a, "%s has %u tensors, params %u", name, count, n);
    return FL_SUCCESS;
}

/* AMP's grad_scale / found_inf (GradScaler): one-element float32 tensors, as ATen's CPU
 * kernel reads them; anything else is declined, so the CPU kernel reports it. */
static fl_status decline_scaler(const flk_args *a, uint32_t first) {
    for (uint32_t i = first; i < first + 2; ++i) {
        const fl_tensor *t;
        FLK_TRY(flk_get_opt_tensor(a, i, i == first ? "grad_scale" : "found_inf", &t));
        if (t && (t->dtype != FL_FLOAT32 || flk_numel(t) != 1))
            return flk_decline(a, "%s must be a one-element float32 tensor",
                               i == first ? "grad_scale" : "found_inf");
    }
    return FL_SUCCESS;
}

/* Reads grad_scale (into *has_scale, *scale) and found_inf; *skip when found_inf is 1:
 * the step is skipped entirely, as ATen's CPU kernel does. */
static fl_status read_scaler(const flk_args *a, uint32_t first, int *has_scale, float *scale,
                             int *skip) {
    const fl_tensor *gs, *inf;
    FLK_TRY(decline_scaler(a, first));
    FLK_TRY(flk_get_opt_tensor(a, first, "grad_scale", &gs));
    FLK_TRY(flk_get_opt_tensor(a, first + 1, "found_inf", &inf));
    *has_scale = gs != NULL;
    *scale = gs ? *(const flk_f32 *)flk_data(gs) : 1.0f;
    *skip = inf != NULL && *(const flk_f32 *)flk_data(inf) == 1.0f;
    return FL_SUCCESS;
}

/* (self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
 *  weight_decay, eps, amsgrad, maximize, grad_scale, found_inf) -> () */
static fl_status adam(const char *op, int decoupled, int tensor_lr, const fl_arg *args,
                      uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    adam_lists L;
    adam_hyper h;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 15, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "self", 0, &L.p, &L.n));
    FLK_TRY(read_list(&a, 1, "grads", L.n, &L.g));
    FLK_TRY(read_list(&a, 2, "exp_avgs", L.n, &L.m));
    FLK_TRY(read_list(&a, 3, "exp_avg_sqs", L.n, &L.v));
    FLK_TRY(read_list(&a, 5, "state_steps", L.n, &L.step));
    if (tensor_lr) {
        flk_operand lr;
        FLK_TRY(flk_get_operand(&a, 6, "lr", &lr));
        h.lr = lr.t ? flk_load_f64(flk_data(lr.t), lr.t->dtype) : lr.s.f;
    } else {
        FLK_TRY(flk_get_double(&a, 6, "lr", &h.lr));
    }
    FLK_TRY(flk_get_double(&a, 7, "beta1", &h.beta1));
    FLK_TRY(flk_get_double(&a, 8, "beta2", &h.beta2));
    FLK_TRY(flk_get_double(&a, 9, "weight_decay", &h.weight_decay));
    FLK_TRY(flk_get_double(&a, 10, "eps", &h.eps));
    FLK_TRY(flk_get_bool(&a, 11, "amsgrad", &h.amsgrad));
    FLK_TRY(flk_get_bool(&a, 12, "maximize", &h.maximize));
    int skip;
    FLK_TRY(read_scaler(&a, 13, &h.has_scale, &h.scale, &skip));
    h.decoupled = decoupled;
    if (h.amsgrad)
        FLK_TRY(read_list(&a, 4, "max_exp_avg_sqs", L.n, &L.vmax));
    for (uint32_t k = 0; k < L.n; ++k) {  /* everything checked before anything is written */
        const fl_tensor *p = L.p[k];
        if (p->dtype != FL_FLOAT32 && p->dtype != FL_FLOAT64)
            return flk_decline(&a, "params[%u] is %s; this kernel takes float32/float64", k,
                               flk_dtype_name(p->dtype));
        FLK_TRY(check_entry(&a, p, L.g[k], "grads", k));
        FLK_TRY(check_entry(&a, p, L.m[k], "exp_avgs", k));
        FLK_TRY(check_entry(&a, p, L.v[k], "exp_avg_sqs", k));
        if (h.amsgrad)
            FLK_TRY(check_entry(&a, p, L.vmax[k], "max_exp_avg_sqs", k));
        if (flk_numel(L.step[k]) != 1)
            return flk_fail(&a, "state_steps[%u] has %lld elements, expected one", k,
                            (long long)flk_numel(L.step[k]));
    }
    for (uint32_t k = 0; k < L.n && !skip; ++k) {
        double step = flk_load_f64(flk_data(L.step[k]), L.step[k]->dtype);
        if (L.p[k]->dtype == FL_FLOAT32)
            adam_update_float(&L, k, &h, step);
        else
            adam_update_double(&L, k, &h, step);
    }
    return FL_SUCCESS;
}

/* Launch-time check (metadata only): what the kernel declines must be declined before
 * anything is enqueued (fl_kernel.h, flk_kernel.accepts), so the runtime can run it elsewhere. */
static fl_status accepts_lists(const char *op, uint32_t expected, uint32_t nlists, uint32_t scaler,
                               const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    FLK_TRY(flk_args_init(&a, op, args, nargs, expected, ctx));
    FLK_TRY(decline_scaler(&a, scaler));
    const fl_tensor *const *p;
    uint32_t n;
    FLK_TRY(flk_get_tensor_list(&a, 0, "self", 0, &p, &n));
    for (uint32_t i = 0; i < nlists; ++i) {
        const fl_tensor *const *ts;
        uint32_t count;
        FLK_TRY(flk_get_tensor_list(&a, i, "tensors", 0, &ts, &count));
        for (uint32_t k = 0; k < count && k < n; ++k) {
            if (ts[k]->dtype != FL_FLOAT32 && ts[k]->dtype != FL_FLOAT64)
                return flk_decline(&a, "list %u entry %u is %s; this kernel takes float32/float64",
                                   i, k, flk_dtype_name(ts[k]->dtype));
            if (ts[k]->dtype != p[k]->dtype)
                return flk_decline(&a, "list %u entry %u is %s, the parameter %s", i, k,
                                   flk_dtype_name(ts[k]->dtype), flk_dtype_name(p[k]->dtype));
        }
    }
    return FL_SUCCESS;
}

FLK_KERNEL_FN(accepts_adam) { return accepts_lists("_fused_adam_", 15, 5, 13, args, nargs, ctx); }
FLK_KERNEL_FN(accepts_sgd) { return accepts_lists("_fused_sgd_", 12, 3, 10, args, nargs, ctx); }

FLK_KERNEL_FN(k_fused_adam) { return adam("_fused_adam_", 0, 0, args, nargs, ctx); }
FLK_KERNEL_FN(k_fused_adam_tlr) { return adam("_fused_adam_.tensor_lr", 0, 1, args, nargs, ctx); }
FLK_KERNEL_FN(k_fused_adamw) { return adam("_fused_adamw_", 1, 0, args, nargs, ctx); }
FLK_KERNEL_FN(k_fused_adamw_tlr) { return adam("_fused_adamw_.tensor_lr", 1, 1, args, nargs, ctx); }
FLK_REGISTER_ENTRY("_fused_adam_", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_adam, accepts_adam);
FLK_REGISTER_ENTRY("_fused_adam_.tensor_lr", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_adam_tlr, accepts_adam);
FLK_REGISTER_ENTRY("_fused_adamw_", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_adamw, accepts_adam);
FLK_REGISTER_ENTRY("_fused_adamw_.tensor_lr", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_adamw_tlr, accepts_adam);

typedef struct sgd_hyper {
    double weight_decay, momentum, lr, dampening;
    int nesterov, maximize, first_step;
    int has_scale; /* GradScaler's grad_scale: grads are divided by it, in place */
    float scale;
} sgd_hyper;

#define SGD_UPDATE(T)                                                                        \
    static void sgd_update_##T(const fl_tensor *p, const fl_tensor *g, const fl_tensor *buf, \
                               const sgd_hyper *h) {                                         \
        const T wd = (T)h->weight_decay, mom = (T)h->momentum, lr = (T)h->lr;                \
        const T one_minus_damp = (T)(1 - h->dampening);                                      \
        const int64_t n = flk_numel(p);                                                      \
        for (int64_t i = 0; i < n; ++i) {                                                    \
            T param = ELEM(T, p, i), grad = ELEM(T, g, i);                                   \
            if (h->has_scale) { /* unscaled and written back, as ATen's CPU kernel does */    \
                grad = grad / (T)h->scale;                                                   \
                ELEM(T, g, i) = grad;                                                        \
            }                                                                                \
            if (h->maximize)                                                                 \
                grad = -grad;                                                                \
            if (wd != 0)                                                                     \
                grad += param * wd;                                                          \
            if (buf) {                                                                       \
                T b = h->first_step ? grad : mom * ELEM(T, buf, i) + one_minus_damp * grad;      \
                ELEM(T, buf, i) = b;                                                         \
                grad = h->nesterov ? grad + mom * b : b;                                     \
            }                                                                                \
            ELEM(T, p, i) = param - lr * grad;                                               \
        }                                                                                    \
    }
SGD_UPDATE(float)
SGD_UPDATE(double)

/* (self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov,
 *  maximize, is_first_step, grad_scale, found_inf) -> () */
static fl_status sgd(const char *op, int tensor_lr, const fl_arg *args, uint32_t nargs,
                     flk_ctx *ctx) {
    flk_args a;
    sgd_hyper h;
    const fl_tensor *const *p, *const *g, *const *buf = NULL;
    uint32_t n, nbuf;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 12, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "self", 0, &p, &n));
    FLK_TRY(read_list(&a, 1, "grads", n, &g));
    FLK_TRY(flk_get_tensor_list(&a, 2, "momentum_buffer_list", 0, &buf, &nbuf));
    FLK_TRY(flk_get_double(&a, 3, "weight_decay", &h.weight_decay));
    FLK_TRY(flk_get_double(&a, 4, "momentum", &h.momentum));
    if (tensor_lr) {
        flk_operand lr;
        FLK_TRY(flk_get_operand(&a, 5, "lr", &lr));
        h.lr = lr.t ? flk_load_f64(flk_data(lr.t), lr.t->dtype) : lr.s.f;
    } else {
        FLK_TRY(flk_get_double(&a, 5, "lr", &h.lr));
    }
    FLK_TRY(flk_get_double(&a, 6, "dampening", &h.dampening));
    FLK_TRY(flk_get_bool(&a, 7, "nesterov", &h.nesterov));
    FLK_TRY(flk_get_bool(&a, 8, "maximize", &h.maximize));
    FLK_TRY(flk_get_bool(&a, 9, "is_first_step", &h.first_step));
    int skip;
    FLK_TRY(read_scaler(&a, 10, &h.has_scale, &h.scale, &skip));
    /* PyTorch passes no buffers when momentum == 0 (plain SGD) */
    if (h.momentum != 0 && nbuf != n)
        return flk_fail(&a, "momentum_buffer_list has %u tensors, params %u", nbuf, n);
    if (h.momentum == 0)
        buf = NULL;
    for (uint32_t k = 0; k < n; ++k) {
        if (p[k]->dtype != FL_FLOAT32 && p[k]->dtype != FL_FLOAT64)
            return flk_decline(&a, "params[%u] is %s; this kernel takes float32/float64", k,
                               flk_dtype_name(p[k]->dtype));
        FLK_TRY(check_entry(&a, p[k], g[k], "grads", k));
        if (buf)
            FLK_TRY(check_entry(&a, p[k], buf[k], "momentum_buffer_list", k));
    }
    for (uint32_t k = 0; k < n && !skip; ++k) {
        if (p[k]->dtype == FL_FLOAT32)
            sgd_update_float(p[k], g[k], buf ? buf[k] : NULL, &h);
        else
            sgd_update_double(p[k], g[k], buf ? buf[k] : NULL, &h);
    }
    return FL_SUCCESS;
}

FLK_KERNEL_FN(k_fused_sgd) { return sgd("_fused_sgd_", 0, args, nargs, ctx); }
FLK_KERNEL_FN(k_fused_sgd_tlr) { return sgd("_fused_sgd_.tensor_lr", 1, args, nargs, ctx); }
FLK_REGISTER_ENTRY("_fused_sgd_", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_sgd, accepts_sgd);
FLK_REGISTER_ENTRY("_fused_sgd_.tensor_lr", FLK_F32_F64, FL_VARIANT_PRECISE, k_fused_sgd_tlr, accepts_sgd);
