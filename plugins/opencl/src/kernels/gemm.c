/*
 * gemm.c -- gemm.h: orientation, packing and the launch of cl/gemm.cl.h.
 */
#include "gemm.h"

#include "elementwise.h"

/* The kernel's argument struct: the same fields, in the same order, as
 * clk_gemm in cl/gemm.cl.h (int64 only, so both sides lay it out alike). */
typedef struct clk_gemm {
    cl_long m, n, k, batch;
    cl_long a_rs, a_ks, a_bs, a_kin, a_ko;
    cl_long b_ks, b_bs;
    cl_long c_rs, c_cs, c_bs;
    cl_long d_rs, d_cs, d_bs;
} clk_gemm;

enum { TILE_COLS = 8, TILE_ROWS = 4 };

static gemm_operand transposed(gemm_operand o) {
    gemm_operand t = {o.t, o.cs, o.rs, o.bs};
    return t;
}

/* The product of the transposes: C^T = B^T A^T. */
static gemm_call swap(gemm_call g) {
    gemm_call s = g;
    s.m = g.n;
    s.n = g.m;
    s.a = transposed(g.b);
    s.b = transposed(g.a);
    s.c = transposed(g.c);
    s.d = transposed(g.d);
    return s;
}

static fl_status launch(const flk_args *a, int32_t dtype, const gemm_call *g) {
    int has_bias = g->d.t != NULL && g->beta != 0.0;
    clk_gemm args = {g->m, g->n, g->k, g->batch,
                     g->a.rs, g->a.cs, g->a.bs, g->a_kin > 0 ? g->a_kin : (g->k > 0 ? g->k : 1), g->a_ko,
                     g->b.rs, g->b.bs, g->c.rs, g->c.cs, g->c.bs,
                     has_bias ? g->d.rs : 0, has_bias ? g->d.cs : 0, has_bias ? g->d.bs : 0};
    clk_launch l;
    clk_begin(&l, a->ctx, CLK_GEMM, dtype, "gemm");
    clk_tensor(&l, g->c.t);
    clk_tensor(&l, g->a.t);
    clk_tensor(&l, g->b.t);
    clk_opt_tensor(&l, has_bias ? g->d.t : NULL);
    clk_bytes(&l, &args, sizeof args);
    clk_scalar(&l, g->alpha);
    clk_scalar(&l, g->beta);
    clk_int(&l, has_bias);
    size_t global[3] = {(size_t)((g->n + TILE_COLS - 1) / TILE_COLS), (size_t)((g->m + TILE_ROWS - 1) / TILE_ROWS),
                        (size_t)g->batch};
    size_t local[3] = {8, 4, 1};
    return clk_run_3d(&l, global, local);
}

/* B copied into a contiguous [batch, k, n] scratch, then the direct product. */
static fl_status packed(const flk_args *a, int32_t dtype, gemm_call g) {
    int64_t sizes[3] = {g.batch, g.k, g.n}, strides[3] = {g.b.bs, g.b.rs, g.b.cs};
    fl_tensor view = *g.b.t;
    view.ndim = 3;
    view.sizes = sizes;
    view.strides = strides;
    clk_scratch pack;
    FLK_TRY(clk_scratch_new(a->ctx, dtype, 3, sizes, &pack));
    fl_status status = ew_unary(a, &pack.t, &view, CLK_U_COPY, 0, 0);
    if (status == FL_SUCCESS) {
        g.b = (gemm_operand){&pack.t, g.n, 1, g.k * g.n};
        status = launch(a, dtype, &g);
    }
    clk_scratch_free(&pack);
    return status;
}

fl_status gemm_run(const flk_args *a, int32_t dtype, gemm_call g) {
    FLK_TRY(clk_need(a->ctx, CLK_GEMM, dtype));
    if (g.m == 0 || g.n == 0 || g.batch == 0)
        return FL_SUCCESS;
    if (g.b.cs == 1 || g.n == 1)
        return launch(a, dtype, &g);
    if ((g.a.rs == 1 || g.m == 1) && g.a_kin == 0) {
        gemm_call s = swap(g);
        return launch(a, dtype, &s);
    }
    return packed(a, dtype, g);
}
