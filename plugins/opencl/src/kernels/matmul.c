/*
 * matmul.c -- mm, addmm and bmm on the matrix product family (gemm.h,
 * cl/gemm.cl.h): any strides (transposed operands included), addmm's self
 * broadcast to the output.  Every tensor of one float dtype; others decline.
 */
#include "gemm.h"

#define FLOATS CLK_FLOATS

static fl_status same_dtype(const flk_args *a, const fl_tensor *const *ts, int n) {
    if (!(CLK_FLOATS & FLK_DT(ts[0]->dtype)))
        return flk_decline(a, "%s has no OpenCL kernel here", flk_dtype_name(ts[0]->dtype));
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->dtype != ts[0]->dtype)
            return flk_decline(a, "mixed dtypes (%s and %s)", flk_dtype_name(ts[0]->dtype),
                               flk_dtype_name(ts[i]->dtype));
    return FL_SUCCESS;
}

static fl_status check_2d(const flk_args *a, const fl_tensor *x, const fl_tensor *y, const fl_tensor *out) {
    if (x->ndim != 2 || y->ndim != 2 || out->ndim != 2)
        return flk_fail(a, "expected 2-d matrices");
    if (x->sizes[1] != y->sizes[0] || out->sizes[0] != x->sizes[0] || out->sizes[1] != y->sizes[1])
        return flk_fail(a, "shapes [%lld, %lld] @ [%lld, %lld] -> [%lld, %lld] do not match",
                        (long long)x->sizes[0], (long long)x->sizes[1], (long long)y->sizes[0],
                        (long long)y->sizes[1], (long long)out->sizes[0], (long long)out->sizes[1]);
    if (flk_may_overlap(out, x) || flk_may_overlap(out, y))
        return flk_decline(a, "the output overlaps an input");
    return FL_SUCCESS;
}

static gemm_call product_2d(const fl_tensor *x, const fl_tensor *y, const fl_tensor *out) {
    gemm_call g = {x->sizes[0], y->sizes[1], x->sizes[1], 1,
                   {x, x->strides[0], x->strides[1], 0}, {y, y->strides[0], y->strides[1], 0},
                   {out, out->strides[0], out->strides[1], 0}, {NULL, 0, 0, 0}, 0, 0, 1.0, 0.0};
    return g;
}

/* mm(self, mat2) */
FLK_KERNEL_FN(k_mm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    FLK_TRY(flk_args_init(&a, "mm", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "mat2", &y));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    FLK_TRY(same_dtype(&a, (const fl_tensor *[]){out, x, y}, 3));
    FLK_TRY(check_2d(&a, x, y, out));
    return gemm_run(&a, out->dtype, product_2d(x, y, out));
}
FLK_REGISTER("mm", FLOATS, k_mm);

/* addmm(self, mat1, mat2, *, beta, alpha) = beta * self + alpha * mat1 @ mat2 */
FLK_KERNEL_FN(k_addmm) {
    flk_args a;
    const fl_tensor *bias, *x, *y, *out;
    double beta, alpha;
    FLK_TRY(flk_args_init(&a, "addmm", args, nargs, 6, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &bias));
    FLK_TRY(flk_get_tensor(&a, 1, "mat1", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "mat2", &y));
    FLK_TRY(flk_get_double(&a, 3, "beta", &beta));
    FLK_TRY(flk_get_double(&a, 4, "alpha", &alpha));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &out));
    FLK_TRY(same_dtype(&a, (const fl_tensor *[]){out, bias, x, y}, 4));
    FLK_TRY(check_2d(&a, x, y, out));
    if (flk_may_overlap(out, bias))
        return flk_decline(&a, "the output overlaps self");
    int64_t strides[2];
    FLK_TRY(flk_broadcast_strides(&a, bias, "self", 2, out->sizes, strides));
    int64_t size = (int64_t)flk_dtype_size(bias->dtype);
    gemm_call g = product_2d(x, y, out);
    g.d = (gemm_operand){bias, strides[0] / size, strides[1] / size, 0};
    g.alpha = alpha;
    g.beta = beta;
    return gemm_run(&a, out->dtype, g);
}
FLK_REGISTER("addmm", FLOATS, k_addmm);

/* bmm(self, mat2) */
FLK_KERNEL_FN(k_bmm) {
    flk_args a;
    const fl_tensor *x, *y, *out;
    FLK_TRY(flk_args_init(&a, "bmm", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &x));
    FLK_TRY(flk_get_tensor(&a, 1, "mat2", &y));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    FLK_TRY(same_dtype(&a, (const fl_tensor *[]){out, x, y}, 3));
    if (x->ndim != 3 || y->ndim != 3 || out->ndim != 3 || x->sizes[0] != y->sizes[0] ||
        x->sizes[2] != y->sizes[1] || out->sizes[0] != x->sizes[0] || out->sizes[1] != x->sizes[1] ||
        out->sizes[2] != y->sizes[2])
        return flk_fail(&a, "expected [b, m, k] @ [b, k, n] -> [b, m, n]");
    if (flk_may_overlap(out, x) || flk_may_overlap(out, y))
        return flk_decline(&a, "the output overlaps an input");
    gemm_call g = {x->sizes[1], y->sizes[2], x->sizes[2], x->sizes[0],
                   {x, x->strides[1], x->strides[2], x->strides[0]}, {y, y->strides[1], y->strides[2], y->strides[0]},
                   {out, out->strides[1], out->strides[2], out->strides[0]}, {NULL, 0, 0, 0}, 0, 0, 1.0, 0.0};
    return gemm_run(&a, out->dtype, g);
}
FLK_REGISTER("bmm", FLOATS, k_bmm);
