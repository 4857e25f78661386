/*
 * pool_avg.c -- avg_pool2d and avg_pool2d_backward for every float
 * dtype (3-d [C,H,W] or 4-d [N,C,H,W], padding, ceil_mode,
 * count_include_pad, divisor_override), on packed float64 planes, with
 * PyTorch's window and divisor rules.
 */
#include "fl_kernel.h"
#include "util/pack.h"
#include "util/pool_window.h"

typedef struct avg_geom {
    int64_t planes, H, W, OH, OW, KH, KW, SH, SW, PH, PW;
    int count_include_pad;
    int64_t divisor; /* 0: none */
} avg_geom;

typedef struct avg_window {
    int64_t h0, h1, w0, w1; /* clipped to the input */
    double divisor;         /* 0 for an empty window */
} avg_window;

static avg_window window_at(const avg_geom *g, int64_t oh, int64_t ow) {
    avg_window w;
    int64_t h0 = oh * g->SH - g->PH, w0 = ow * g->SW - g->PW;
    int64_t h1 = h0 + g->KH < g->H + g->PH ? h0 + g->KH : g->H + g->PH;
    int64_t w1 = w0 + g->KW < g->W + g->PW ? w0 + g->KW : g->W + g->PW;
    const int64_t padded = (h1 - h0) * (w1 - w0);
    w.h0 = h0 < 0 ? 0 : h0;
    w.w0 = w0 < 0 ? 0 : w0;
    w.h1 = h1 < g->H ? h1 : g->H;
    w.w1 = w1 < g->W ? w1 : g->W;
    const int64_t inside = (w.h1 - w.h0) * (w.w1 - w.w0);
    w.divisor = (w.h0 >= w.h1 || w.w0 >= w.w1) ? 0.0
                : g->divisor                   ? (double)g->divisor
                : g->count_include_pad         ? (double)padded
                                               : (double)inside;
    return w;
}

/* args from ki: kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override */
static fl_status parse_avg(const flk_args *a, const fl_tensor *x, uint32_t ki, avg_geom *g) {
    int ceil_mode, has_div;
    memset(g, 0, sizeof *g);
    const ref_pool_window w = {&g->KH, &g->KW, &g->SH, &g->SW, &g->PH, &g->PW};
    FLK_TRY(ref_pool_window_args(a, ki, &w));
    FLK_TRY(flk_get_bool(a, ki + 3, "ceil_mode", &ceil_mode));
    FLK_TRY(flk_get_bool(a, ki + 4, "count_include_pad", &g->count_include_pad));
    FLK_TRY(flk_get_opt_int(a, ki + 5, "divisor_override", &has_div, &g->divisor));
    if (!has_div)
        g->divisor = 0;
    FLK_TRY(flk_check_dtype(a, x, "self", FLK_FLOAT_TYPES));
    if (x->ndim != 3 && x->ndim != 4)
        return flk_fail(a, "expected a 3-d or 4-d input, got %d dims", (int)x->ndim);
    if (g->KH <= 0 || g->KW <= 0 || g->SH <= 0 || g->SW <= 0 || (has_div && g->divisor == 0))
        return flk_fail(a, "kernel_size, stride and divisor_override must be positive");
    if (g->PH < 0 || g->PW < 0 || g->PH > g->KH / 2 || g->PW > g->KW / 2)
        return flk_fail(a, "pad should be non-negative and at most half of the kernel size");
    g->H = x->sizes[x->ndim - 2];
    g->W = x->sizes[x->ndim - 1];
    g->planes = g->H > 0 && g->W > 0 ? flk_numel(x) / (g->H * g->W) : 0;
    g->OH = ref_pool_out_size(g->H, g->KH, g->PH, g->SH, 1, ceil_mode);
    g->OW = ref_pool_out_size(g->W, g->KW, g->PW, g->SW, 1, ceil_mode);
    return FL_SUCCESS;
}

/* forward (y from x) or backward (gx from gy): the same windows */
static void avg_planes(const avg_geom *g, const double *src, double *dst, int backward) {
    for (int64_t p = 0; p < g->planes; ++p) {
        const double *in = backward ? src + p * g->OH * g->OW : src + p * g->H * g->W;
        double *out = backward ? dst + p * g->H * g->W : dst + p * g->OH * g->OW;
        for (int64_t oh = 0; oh < g->OH; ++oh)
            for (int64_t ow = 0; ow < g->OW; ++ow) {
                const avg_window w = window_at(g, oh, ow);
                double s = 0.0, share = w.divisor ? in[oh * g->OW + ow] / w.divisor : 0.0;
                for (int64_t h = w.h0; h < w.h1; ++h)
                    for (int64_t c = w.w0; c < w.w1; ++c) {
                        if (backward)
                            out[h * g->W + c] += share;
                        else
                            s += in[h * g->W + c];
                    }
                if (!backward)
                    out[oh * g->OW + ow] = w.divisor ? s / w.divisor : 0.0;
            }
    }
}

static fl_status avg_run(const flk_args *a, const avg_geom *g, const fl_tensor *src,
                         const fl_tensor *dst, int backward) {
    const int64_t nout = g->planes * (backward ? g->H * g->W : g->OH * g->OW);
    if (flk_numel(dst) != nout)
        return flk_fail(a, "output has %lld elements, the pooling gives %lld",
                        (long long)flk_numel(dst), (long long)nout);
    void *buf[2] = {0};
    fl_status st = ref_pack(a, src, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, nout, (double **)&buf[1]);
    if (st == FL_SUCCESS) {
        memset(buf[1], 0, (size_t)nout * sizeof(double));
        avg_planes(g, buf[0], buf[1], backward);
        ref_unpack(dst, FL_FLOAT64, buf[1]);
    }
    ref_free_all(buf, 2);
    return st;
}

/* avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 *            divisor_override?) */
FLK_KERNEL_FN(k_avg_pool2d) {
    flk_args a;
    const fl_tensor *x, *y;
    avg_geom g;
    FLK_TRY(flk_args_init(&a, "avg_pool2d", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 7, "out", &y));
    FLK_TRY(parse_avg(&a, x, 1, &g));
    return avg_run(&a, &g, x, y, 0);
}
FLK_REGISTER("avg_pool2d", FLK_FLOAT_TYPES, k_avg_pool2d);

/* avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 *                     count_include_pad, divisor_override?) */
FLK_KERNEL_FN(k_avg_pool2d_backward) {
    flk_args a;
    const fl_tensor *gy, *x, *gx;
    avg_geom g;
    FLK_TRY(flk_args_init(&a, "avg_pool2d_backward", args, nargs, 9, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_output", &gy));
    FLK_TRY(flk_get_tensor(&a, 1, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 8, "grad_input", &gx));
    FLK_TRY(parse_avg(&a, x, 2, &g));
    if (flk_numel(gy) != g.planes * g.OH * g.OW)
        return flk_fail(&a, "grad_output does not match the pooling's output shape");
    return avg_run(&a, &g, gy, gx, 1);
}
FLK_REGISTER("avg_pool2d_backward", FLK_FLOAT_TYPES, k_avg_pool2d_backward);
