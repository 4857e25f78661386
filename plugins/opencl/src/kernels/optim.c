/*
 * optim.c -- torch.optim's fused Adam and AdamW steps (fused=True):
 * _fused_adam_ and _fused_adamw_, one adam_step launch (cl/ew.cl.h) per
 * parameter, the arithmetic of ATen's FusedAdamKernel.cpp with GradScaler's
 * grad_scale and found_inf read on the device.  The step counters were
 * already incremented by the caller, as on the CPU.  Contiguous float
 * tensors of one dtype per parameter; anything else declines before the
 * first launch.  (The tensor-lr overloads are not written: they run through
 * the fallback.)
 */
#include "clk.h"

#include <math.h>

#define FLOATS CLK_FLOATS

typedef struct adam_lists {
    const fl_tensor *const *p, *const *g, *const *m, *const *v, *const *vmax, *const *step;
    uint32_t n;
} adam_lists;

static fl_status read_list(const flk_args *a, uint32_t i, const char *name, uint32_t n, const fl_tensor *const **out) {
    uint32_t count;
    FLK_TRY(flk_get_tensor_list(a, i, name, 0, out, &count));
    if (count != n)
        return flk_fail(a, "%s has %u tensors, params %u", name, count, n);
    return FL_SUCCESS;
}

static fl_status check_entry(const flk_args *a, const fl_tensor *p, const fl_tensor *t, const char *what, uint32_t k) {
    if (t->dtype != p->dtype)
        return flk_decline(a, "%s[%u] is %s, the parameter %s", what, k, flk_dtype_name(t->dtype),
                           flk_dtype_name(p->dtype));
    if (!flk_same_sizes(t, p))
        return flk_fail(a, "%s[%u] has a different shape from params[%u]", what, k, k);
    if (!flk_is_contiguous(t))
        return flk_decline(a, "%s[%u] is not contiguous", what, k);
    return FL_SUCCESS;
}

/* a one-element float32 tensor (state_steps, grad_scale, found_inf), or NULL where optional */
static fl_status check_scalar_tensor(const flk_args *a, const fl_tensor *t, const char *what) {
    if (t && (t->dtype != FL_FLOAT32 || flk_numel(t) != 1))
        return flk_decline(a, "%s must be a one-element float32 tensor", what);
    return FL_SUCCESS;
}

static fl_status check_all(const flk_args *a, const adam_lists *L, int amsgrad) {
    for (uint32_t k = 0; k < L->n; ++k) {
        const fl_tensor *p = L->p[k];
        if (!(CLK_FLOATS & FLK_DT(p->dtype)) || !flk_is_contiguous(p))
            return flk_decline(a, "params[%u] is %s or not contiguous", k, flk_dtype_name(p->dtype));
        FLK_TRY(check_entry(a, p, L->g[k], "grads", k));
        FLK_TRY(check_entry(a, p, L->m[k], "exp_avgs", k));
        FLK_TRY(check_entry(a, p, L->v[k], "exp_avg_sqs", k));
        if (amsgrad)
            FLK_TRY(check_entry(a, p, L->vmax[k], "max_exp_avg_sqs", k));
        FLK_TRY(check_scalar_tensor(a, L->step[k], "state_steps entries"));
        FLK_TRY(clk_need(a->ctx, CLK_EW, p->dtype));
    }
    return FL_SUCCESS;
}

/* (self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
 *  weight_decay, eps, amsgrad, maximize, grad_scale, found_inf) -> () */
static fl_status adam(const char *op, int decoupled, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    adam_lists L = {0};
    double lr, beta1, beta2, wd, eps;
    int amsgrad, maximize;
    const fl_tensor *scale, *found;
    FLK_TRY(flk_args_init(&a, op, args, nargs, 15, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "self", 0, &L.p, &L.n));
    FLK_TRY(read_list(&a, 1, "grads", L.n, &L.g));
    FLK_TRY(read_list(&a, 2, "exp_avgs", L.n, &L.m));
    FLK_TRY(read_list(&a, 3, "exp_avg_sqs", L.n, &L.v));
    FLK_TRY(read_list(&a, 5, "state_steps", L.n, &L.step));
    FLK_TRY(flk_get_double(&a, 6, "lr", &lr));
    FLK_TRY(flk_get_double(&a, 7, "beta1", &beta1));
    FLK_TRY(flk_get_double(&a, 8, "beta2", &beta2));
    FLK_TRY(flk_get_double(&a, 9, "weight_decay", &wd));
    FLK_TRY(flk_get_double(&a, 10, "eps", &eps));
    FLK_TRY(flk_get_bool(&a, 11, "amsgrad", &amsgrad));
    FLK_TRY(flk_get_bool(&a, 12, "maximize", &maximize));
    FLK_TRY(flk_get_opt_tensor(&a, 13, "grad_scale", &scale));
    FLK_TRY(flk_get_opt_tensor(&a, 14, "found_inf", &found));
    if (amsgrad)
        FLK_TRY(read_list(&a, 4, "max_exp_avg_sqs", L.n, &L.vmax));
    FLK_TRY(check_scalar_tensor(&a, scale, "grad_scale"));
    FLK_TRY(check_scalar_tensor(&a, found, "found_inf"));
    FLK_TRY(check_all(&a, &L, amsgrad));
    int flags = (amsgrad ? 1 : 0) | (maximize ? 2 : 0) | (decoupled ? 4 : 0) | (scale ? 8 : 0) | (found ? 16 : 0);
    for (uint32_t k = 0; k < L.n; ++k) {
        const fl_tensor *p = L.p[k];
        clk_launch l;
        clk_begin(&l, ctx, CLK_EW, p->dtype, "adam_step");
        clk_tensor(&l, p);
        clk_tensor(&l, L.g[k]);
        clk_tensor(&l, L.m[k]);
        clk_tensor(&l, L.v[k]);
        clk_opt_tensor(&l, amsgrad ? L.vmax[k] : NULL);
        clk_tensor(&l, L.step[k]);
        clk_opt_tensor(&l, scale);
        clk_opt_tensor(&l, found);
        clk_long(&l, flk_numel(p));
        clk_scalar(&l, lr);
        clk_scalar(&l, beta1);
        clk_scalar(&l, beta2);
        clk_scalar(&l, 1 - beta1);   /* in double, then rounded: ATen's (1 - beta) */
        clk_scalar(&l, 1 - beta2);
        /* ln(beta) in double: the kernel's 1 - beta^step is -expm1(step * ln(beta)), exact
         * to the ACC's precision (1 - pow(beta, step) in float loses 4 digits at step 1) */
        clk_scalar(&l, log(beta1));
        clk_scalar(&l, log(beta2));
        clk_scalar(&l, wd);
        clk_scalar(&l, eps);
        clk_int(&l, flags);
        FLK_TRY(clk_run(&l, flk_numel(p)));
    }
    return FL_SUCCESS;
}
FLK_KERNEL_FN(k_fused_adam) { return adam("_fused_adam_", 0, args, nargs, ctx); }
FLK_REGISTER("_fused_adam_", FLOATS, k_fused_adam);
FLK_KERNEL_FN(k_fused_adamw) { return adam("_fused_adamw_", 1, args, nargs, ctx); }
FLK_REGISTER("_fused_adamw_", FLOATS, k_fused_adamw);

/* (self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov,
 *  maximize, is_first_step, grad_scale, found_inf) -> () */
FLK_KERNEL_FN(k_fused_sgd) {
    flk_args a;
    const fl_tensor *const *p, *const *g, *const *buf;
    const fl_tensor *scale, *found;
    uint32_t n, nbuf;
    double wd, mom, lr, damp;
    int nesterov, maximize, first;
    FLK_TRY(flk_args_init(&a, "_fused_sgd_", args, nargs, 12, ctx));
    FLK_TRY(flk_get_tensor_list(&a, 0, "self", 0, &p, &n));
    FLK_TRY(read_list(&a, 1, "grads", n, &g));
    FLK_TRY(flk_get_tensor_list(&a, 2, "momentum_buffer_list", 0, &buf, &nbuf));
    FLK_TRY(flk_get_double(&a, 3, "weight_decay", &wd));
    FLK_TRY(flk_get_double(&a, 4, "momentum", &mom));
    FLK_TRY(flk_get_double(&a, 5, "lr", &lr));
    FLK_TRY(flk_get_double(&a, 6, "dampening", &damp));
    FLK_TRY(flk_get_bool(&a, 7, "nesterov", &nesterov));
    FLK_TRY(flk_get_bool(&a, 8, "maximize", &maximize));
    FLK_TRY(flk_get_bool(&a, 9, "is_first_step", &first));
    FLK_TRY(flk_get_opt_tensor(&a, 10, "grad_scale", &scale));
    FLK_TRY(flk_get_opt_tensor(&a, 11, "found_inf", &found));
    FLK_TRY(check_scalar_tensor(&a, scale, "grad_scale"));
    FLK_TRY(check_scalar_tensor(&a, found, "found_inf"));
    /* PyTorch passes no buffers when momentum == 0 (plain SGD) */
    if (mom != 0 && nbuf != n)
        return flk_fail(&a, "momentum_buffer_list has %u tensors, params %u", nbuf, n);
    int momentum = mom != 0;
    for (uint32_t k = 0; k < n; ++k) {
        if (!(CLK_FLOATS & FLK_DT(p[k]->dtype)) || !flk_is_contiguous(p[k]))
            return flk_decline(&a, "params[%u] is %s or not contiguous", k, flk_dtype_name(p[k]->dtype));
        FLK_TRY(check_entry(&a, p[k], g[k], "grads", k));
        if (momentum)
            FLK_TRY(check_entry(&a, p[k], buf[k], "momentum_buffer_list", k));
        FLK_TRY(clk_need(ctx, CLK_EW, p[k]->dtype));
    }
    int flags = momentum | (nesterov ? 2 : 0) | (maximize ? 4 : 0) | (first ? 8 : 0) | (scale ? 16 : 0) |
                (found ? 32 : 0);
    for (uint32_t k = 0; k < n; ++k) {
        clk_launch l;
        clk_begin(&l, ctx, CLK_EW, p[k]->dtype, "sgd_step");
        clk_tensor(&l, p[k]);
        clk_tensor(&l, g[k]);
        clk_opt_tensor(&l, momentum ? buf[k] : NULL);
        clk_opt_tensor(&l, scale);
        clk_opt_tensor(&l, found);
        clk_long(&l, flk_numel(p[k]));
        clk_scalar(&l, lr);
        clk_scalar(&l, wd);
        clk_scalar(&l, mom);
        clk_scalar(&l, 1 - damp);
        clk_int(&l, flags);
        FLK_TRY(clk_run(&l, flk_numel(p[k])));
    }
    return FL_SUCCESS;
}
FLK_REGISTER("_fused_sgd_", FLOATS, k_fused_sgd);
