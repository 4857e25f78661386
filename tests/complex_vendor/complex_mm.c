/*
 * complex_mm.c -- a complex64 `mm` for the reference plugin, for the tests of
 * conjugate views (tests/runtime/test_conj_inputs.py).
 *
 * The reference vendor declares no complex kernels.  The test rebuilds it with
 * a copy of kernels/matmul.c whose "mm" registration adds complex64 to the
 * dtype mask and sends that dtype here (a kernel table holds one "mm" per
 * variant: fl_kernel.h, flk_table).  Like every kernel it reads tensors as
 * physical values (fl_abi.h, fl_tensor): the runtime must hand it resolved
 * conjugates.  A plain triple loop over strided operands; test sizes only.
 */
#include "fl_kernel.h"

typedef struct c64 {
    float re, im;
} __attribute__((aligned(1), may_alias)) c64;

static const c64 *at(const fl_tensor *t, int64_t i, int64_t j) {
    return (const c64 *)flk_data(t) + i * t->strides[0] + j * t->strides[1];
}

/* mm(Tensor self, Tensor mat2) -> out, complex64 only */
fl_status complex_mm_c64(const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    if (nargs != 3)
        return flk_kernel_fail(ctx, "complex mm: expected 3 arguments, got %u", nargs);
    for (uint32_t i = 0; i < 3; ++i)
        if (args[i].kind != FL_ARG_TENSOR || args[i].value.tensor->dtype != FL_COMPLEX64 ||
            args[i].value.tensor->ndim != 2)
            return flk_kernel_fail(ctx, "complex mm: argument %u is not a 2-D complex64 tensor", i);
    const fl_tensor *x = args[0].value.tensor, *y = args[1].value.tensor, *out = args[2].value.tensor;
    int64_t m = x->sizes[0], k = x->sizes[1], n = y->sizes[1];
    if (y->sizes[0] != k || out->sizes[0] != m || out->sizes[1] != n)
        return flk_kernel_fail(ctx, "complex mm: shapes do not match");
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double re = 0.0, im = 0.0;
            for (int64_t p = 0; p < k; ++p) {
                const c64 *u = at(x, i, p), *v = at(y, p, j);
                re += (double)u->re * v->re - (double)u->im * v->im;
                im += (double)u->re * v->im + (double)u->im * v->re;
            }
            c64 *o = (c64 *)at(out, i, j);
            o->re = (float)re;
            o->im = (float)im;
        }
    return FL_SUCCESS;
}

/* mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out): the same, written into out
 * (the calling convention passes out among the arguments and again as the output). */
FLK_KERNEL_FN(k_complex_mm_out) {
    if (nargs != 4)
        return flk_kernel_fail(ctx, "complex mm.out: expected 4 arguments, got %u", nargs);
    return complex_mm_c64(args, 3, ctx);
}
FLK_REGISTER("mm.out", FLK_DT(FL_COMPLEX64), k_complex_mm_out);
