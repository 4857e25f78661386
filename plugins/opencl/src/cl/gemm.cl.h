/*
 * gemm.cl.h -- OpenCL C of the matrix product family (CLK_GEMM): one tiled
 * kernel for mm, addmm, bmm and the convolutions (see cl_sources.c for how
 * this file becomes a string).
 *
 * C[b] = alpha * A[b] @ B[b] + beta * D[b] for M x K times K x N.  Each work
 * item computes a 4 x 8 block of C in registers: it walks k, broadcasts four
 * elements of A's rows and multiplies eight consecutive elements of B's row,
 * loaded as one vector, so B must have unit stride along n (the host swaps
 * the operands or packs B when it has not).  A has any strides, and its k may
 * be split into (k / a_kin, k % a_kin) with two strides: the convolution's
 * weight gradient sums over (batch, pixel) pairs in one product.  D (addmm's
 * self) broadcasts through its strides; has_bias 0 ignores it (beta == 0:
 * PyTorch does not read it, NaN included).  Accumulation is in ACC (float
 * for float16), each step one mad.
 */
FLCL_PROGRAM(gemm,

typedef struct clk_gemm {
    long m, n, k, batch;
    long a_rs, a_ks, a_bs, a_kin, a_ko;
    long b_ks, b_bs;
    long c_rs, c_cs, c_bs;
    long d_rs, d_cs, d_bs;
} clk_gemm;

ACC8 row_of_b(__global const T *b, long at, long cols) {
    if (cols >= 8)
        return LD8(b, at);
    ACC tmp[8];
    for (int j = 0; j < 8; j++)
        tmp[j] = j < cols ? LD(b, at + j) : (ACC)0;
    return vload8(0, tmp);
}

void store_row(__global T *c, long c0, __global const T *d, long d0, const clk_gemm *g, long row, long col,
               long cols, ACC8 acc, ACC alpha, ACC beta, int has_bias) {
    ACC v[8];
    vstore8(acc, 0, v);
    for (int j = 0; j < 8 && j < cols; j++) {
        ACC r = alpha * v[j];
        if (has_bias)
            r = r + beta * LD(d, d0 + row * g->d_rs + (col + j) * g->d_cs);
        ST(c, c0 + row * g->c_rs + (col + j) * g->c_cs, r);
    }
}

__kernel void gemm(__global T *c, long c0, __global const T *a, long a0, __global const T *b, long b0,
                   __global const T *d, long d0, clk_gemm g, ACC alpha, ACC beta, int has_bias) {
    long col = get_global_id(0) * 8, row = get_global_id(1) * 4, bt = get_global_id(2);
    if (col >= g.n || row >= g.m || bt >= g.batch)
        return;
    long cols = g.n - col;
    long rows = g.m - row;
    /* rows past the end read row m - 1 (always valid) and are not stored */
    long r1 = rows > 1 ? row + 1 : row, r2 = rows > 2 ? row + 2 : row, r3 = rows > 3 ? row + 3 : row;
    __global const T *ab = a + a0 + bt * g.a_bs;
    __global const T *bb = b + b0 + bt * g.b_bs;
    long ar0 = row * g.a_rs, ar1 = r1 * g.a_rs, ar2 = r2 * g.a_rs, ar3 = r3 * g.a_rs;
    ACC8 acc0 = (ACC8)(0), acc1 = (ACC8)(0), acc2 = (ACC8)(0), acc3 = (ACC8)(0);
    long q = 0, r = 0;
    for (long kk = 0; kk < g.k; kk++) {
        long ak = q * g.a_ko + r * g.a_ks;
        ACC8 bv = row_of_b(bb, kk * g.b_ks + col, cols);
        acc0 = mad((ACC8)(LD(ab, ar0 + ak)), bv, acc0);
        acc1 = mad((ACC8)(LD(ab, ar1 + ak)), bv, acc1);
        acc2 = mad((ACC8)(LD(ab, ar2 + ak)), bv, acc2);
        acc3 = mad((ACC8)(LD(ab, ar3 + ak)), bv, acc3);
        if (++r == g.a_kin) {
            r = 0;
            q++;
        }
    }
    __global T *cb = c + bt * g.c_bs;
    __global const T *db = has_bias ? d + bt * g.d_bs : d;
    store_row(cb, c0, db, d0, &g, row, col, cols, acc0, alpha, beta, has_bias);
    if (rows > 1)
        store_row(cb, c0, db, d0, &g, row + 1, col, cols, acc1, alpha, beta, has_bias);
    if (rows > 2)
        store_row(cb, c0, db, d0, &g, row + 2, col, cols, acc2, alpha, beta, has_bias);
    if (rows > 3)
        store_row(cb, c0, db, d0, &g, row + 3, col, cols, acc3, alpha, beta, has_bias);
}

)
