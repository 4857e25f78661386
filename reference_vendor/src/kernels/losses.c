/*
 * losses.c -- pointwise losses with a reduction and their
 * backwards: mse_loss, binary_cross_entropy (optional weight; logs clamped
 * at -100 as PyTorch does), smooth_l1_loss (beta; beta = 0 is L1).
 *
 * One engine: the per-element loss l(x, t) and its derivative dl/dx, computed
 * in float64 on packed operands; reduction none (0), mean (1) or sum (2).
 * Operands must have the input's shape (the Python layers broadcast first).
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/pack.h"

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

typedef double (*loss_fn)(double x, double t, double beta);

static double mse(double x, double t, double beta) {
    (void)beta;
    return (x - t) * (x - t);
}
static double mse_grad(double x, double t, double beta) {
    (void)beta;
    return 2.0 * (x - t);
}
static double bce(double x, double t, double beta) {
    (void)beta;
    const double lx = fmax(log(x), -100.0), l1x = fmax(log1p(-x), -100.0);
    return -(t * lx + (1.0 - t) * l1x);
}
static double bce_grad(double x, double t, double beta) {
    (void)beta;
    return (x - t) / fmax((1.0 - x) * x, 1e-12);
}
static double smooth_l1(double x, double t, double beta) {
    const double d = fabs(x - t);
    return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
}
static double smooth_l1_grad(double x, double t, double beta) {
    const double d = x - t; /* PyTorch's formula, including 0/0 at beta = 0 */
    return d < -beta ? -1.0 : d > beta ? 1.0 : d / beta;
}

static double huber(double x, double t, double delta) {
    const double d = fabs(x - t);
    return d < delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
}
static double huber_grad(double x, double t, double delta) {
    const double d = x - t;
    return d < -delta ? -delta : d > delta ? delta : d;
}

typedef struct loss_job {
    const fl_tensor *x, *t, *w, *g, *out;
    int64_t reduction;
    double beta;
    loss_fn f;
} loss_job;

static fl_status check_operands(const flk_args *a, const loss_job *j) {
    FLK_TRY(flk_check_dtype(a, j->x, "self", FLK_FLOAT_TYPES));
    if (!flk_same_sizes(j->x, j->t))
        return flk_fail(a, "target must have the input's shape (broadcast it first)");
    if (j->w && !flk_same_sizes(j->x, j->w))
        return flk_fail(a, "weight must have the input's shape (broadcast it first)");
    if (j->reduction < RED_NONE || j->reduction > RED_SUM)
        return flk_fail(a, "reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld",
                        (long long)j->reduction);
    return FL_SUCCESS;
}

/* forward (j->g NULL): loss per element, then the reduction.  backward: the
 * derivative times grad_output (elementwise for none, the scalar otherwise,
 * divided by n for mean) */
static fl_status run_loss(const flk_args *a, const loss_job *j) {
    FLK_TRY(check_operands(a, j));
    const int64_t n = flk_numel(j->x);
    void *buf[5] = {0};
    fl_status st = ref_pack(a, j->x, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(a, j->t, FL_FLOAT64, &buf[1]);
    if (st == FL_SUCCESS) st = ref_pack(a, j->w, FL_FLOAT64, &buf[2]);
    if (st == FL_SUCCESS) st = ref_pack(a, j->g, FL_FLOAT64, &buf[3]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, n, (double **)&buf[4]);
    if (st == FL_SUCCESS) {
        const double *x = buf[0], *t = buf[1], *w = buf[2], *g = buf[3];
        double *o = buf[4], total = 0.0;
        const int per_elem_grad = g && j->reduction == RED_NONE;
        const double gscale = !g || per_elem_grad ? 1.0
                              : g[0] / (j->reduction == RED_MEAN ? (double)n : 1.0);
        for (int64_t i = 0; i < n; ++i) {
            const double v = j->f(x[i], t[i], j->beta) * (w ? w[i] : 1.0);
            o[i] = g ? v * (per_elem_grad ? g[i] : gscale) : v;
            total += v;
        }
        if (!g && j->reduction != RED_NONE)
            o[0] = j->reduction == RED_MEAN ? total / (double)n : total;
        ref_unpack(j->out, FL_FLOAT64, o);
    }
    ref_free_all(buf, 5);
    return st;
}

/* mse_loss(self, target, reduction) */
FLK_KERNEL_FN(k_mse_loss) {
    flk_args a;
    loss_job j = {.f = mse};
    FLK_TRY(flk_args_init(&a, "mse_loss", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 1, "target", &j.t));
    FLK_TRY(flk_get_int(&a, 2, "reduction", &j.reduction));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &j.out));
    return run_loss(&a, &j);
}
FLK_REGISTER("mse_loss", FLK_FLOAT_TYPES, k_mse_loss);

/* mse_loss_backward(grad_output, self, target, reduction) */
FLK_KERNEL_FN(k_mse_loss_backward) {
    flk_args a;
    loss_job j = {.f = mse_grad};
    FLK_TRY(flk_args_init(&a, "mse_loss_backward", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &j.g));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 2, "target", &j.t));
    FLK_TRY(flk_get_int(&a, 3, "reduction", &j.reduction));
    FLK_TRY(flk_get_tensor(&a, 4, "grad_input", &j.out));
    return run_loss(&a, &j);
}
FLK_REGISTER("mse_loss_backward", FLK_FLOAT_TYPES, k_mse_loss_backward);

/* binary_cross_entropy(self, target, weight?, reduction) */
FLK_KERNEL_FN(k_binary_cross_entropy) {
    flk_args a;
    loss_job j = {.f = bce};
    FLK_TRY(flk_args_init(&a, "binary_cross_entropy", args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 1, "target", &j.t));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &j.w));
    FLK_TRY(flk_get_int(&a, 3, "reduction", &j.reduction));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &j.out));
    return run_loss(&a, &j);
}
FLK_REGISTER("binary_cross_entropy", FLK_FLOAT_TYPES, k_binary_cross_entropy);

/* binary_cross_entropy_backward(grad_output, self, target, weight?, reduction) */
FLK_KERNEL_FN(k_binary_cross_entropy_backward) {
    flk_args a;
    loss_job j = {.f = bce_grad};
    FLK_TRY(flk_args_init(&a, "binary_cross_entropy_backward", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &j.g));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 2, "target", &j.t));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "weight", &j.w));
    FLK_TRY(flk_get_int(&a, 4, "reduction", &j.reduction));
    FLK_TRY(flk_get_tensor(&a, 5, "grad_input", &j.out));
    return run_loss(&a, &j);
}
FLK_REGISTER("binary_cross_entropy_backward", FLK_FLOAT_TYPES, k_binary_cross_entropy_backward);

/* smooth_l1_loss / huber_loss (self, target, reduction, beta | delta) */
static fl_status beta_loss(const char *op, const fl_arg *args, uint32_t nargs,
                           flk_ctx *ctx, loss_fn f) {
    flk_args a;
    loss_job j = {.f = f};
    FLK_TRY(flk_args_init(&a, op, args, nargs, 5, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 1, "target", &j.t));
    FLK_TRY(flk_get_int(&a, 2, "reduction", &j.reduction));
    FLK_TRY(flk_get_double(&a, 3, "beta", &j.beta));
    FLK_TRY(flk_get_tensor(&a, 4, "out", &j.out));
    if (j.beta < 0)
        return flk_fail(&a, "beta / delta must be non-negative, got %g", j.beta);
    return run_loss(&a, &j);
}
FLK_KERNEL_FN(k_smooth_l1_loss) { return beta_loss("smooth_l1_loss", args, nargs, ctx, smooth_l1); }
FLK_REGISTER("smooth_l1_loss", FLK_FLOAT_TYPES, k_smooth_l1_loss);
FLK_KERNEL_FN(k_huber_loss) { return beta_loss("huber_loss", args, nargs, ctx, huber); }
FLK_REGISTER("huber_loss", FLK_FLOAT_TYPES, k_huber_loss);

/* smooth_l1_loss_backward / huber_loss_backward (grad_output, self, target,
 * reduction, beta | delta) */
static fl_status beta_loss_backward(const char *op, const fl_arg *args, uint32_t nargs,
                                    flk_ctx *ctx, loss_fn f) {
    flk_args a;
    loss_job j = {.f = f};
    FLK_TRY(flk_args_init(&a, op, args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &j.g));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &j.x));
    FLK_TRY(flk_get_tensor(&a, 2, "target", &j.t));
    FLK_TRY(flk_get_int(&a, 3, "reduction", &j.reduction));
    FLK_TRY(flk_get_double(&a, 4, "beta", &j.beta));
    FLK_TRY(flk_get_tensor(&a, 5, "grad_input", &j.out));
    return run_loss(&a, &j);
}
FLK_KERNEL_FN(k_smooth_l1_loss_backward) {
    return beta_loss_backward("smooth_l1_loss_backward", args, nargs, ctx, smooth_l1_grad);
}
FLK_REGISTER("smooth_l1_loss_backward", FLK_FLOAT_TYPES, k_smooth_l1_loss_backward);
FLK_KERNEL_FN(k_huber_loss_backward) {
    return beta_loss_backward("huber_loss_backward", args, nargs, ctx, huber_grad);
}
FLK_REGISTER("huber_loss_backward", FLK_FLOAT_TYPES, k_huber_loss_backward);
