/*
 * iter.c -- strided N-d iteration by rows (dropping size-1 dims, ordering by
 * stride, coalescing) and numpy broadcasting (fl_kernel.h section 7).
 */
#include "fl_kernel.h"

#define ITER_MAX_OPS 8

int flk_simplify_dims(int ndim, const int64_t *sizes, int nops, int64_t strides[][FLK_MAX_DIMS],
                      int order_op, int64_t *sz, int64_t st[][FLK_MAX_DIMS]) {
    int nd = 0;
    for (int d = 0; d < ndim; ++d) {
        if (sizes[d] == 0)
            return -1;
        if (sizes[d] == 1)
            continue;
        sz[nd] = sizes[d];
        for (int k = 0; k < nops; ++k)
            st[k][nd] = strides[k][d];
        ++nd;
    }
    /* order: largest |stride| of order_op outermost (stable insertion sort) */
    if (order_op >= 0 && order_op < nops) {
        for (int i = 1; i < nd; ++i) {
            int j = i;
            while (j > 0) {
                int64_t a = st[order_op][j - 1], b = st[order_op][j];
                if (a < 0) a = -a;
                if (b < 0) b = -b;
                if (a >= b)
                    break;
                int64_t t = sz[j];
                sz[j] = sz[j - 1];
                sz[j - 1] = t;
                for (int k = 0; k < nops; ++k) {
                    t = st[k][j];
                    st[k][j] = st[k][j - 1];
                    st[k][j - 1] = t;
                }
                --j;
            }
        }
    }
    /* coalesce (outer p, inner d) when st[k][p] == st[k][d] * sz[d] for all k */
    if (nd > 1) {
        int out = 0;
        for (int d = 1; d < nd; ++d) {
            int ok = 1;
            for (int k = 0; k < nops; ++k)
                if (st[k][out] != st[k][d] * sz[d]) {
                    ok = 0;
                    break;
                }
            if (ok) {
                sz[out] *= sz[d];
                for (int k = 0; k < nops; ++k)
                    st[k][out] = st[k][d];
            } else {
                ++out;
                sz[out] = sz[d];
                for (int k = 0; k < nops; ++k)
                    st[k][out] = st[k][d];
            }
        }
        nd = out + 1;
    }
    return nd;
}

void flk_for_each_row(int ndim, const int64_t *sizes, int nops, char *const *ptrs,
                      int64_t strides[][FLK_MAX_DIMS], int order_op, flk_row_fn fn,
                      void *ctx) {
    int64_t sz[FLK_MAX_DIMS];
    int64_t st[ITER_MAX_OPS][FLK_MAX_DIMS];
    if (nops > ITER_MAX_OPS || ndim > FLK_MAX_DIMS)
        return; /* callers never do this */
    int nd = flk_simplify_dims(ndim, sizes, nops, strides, order_op, sz, st);
    if (nd < 0)
        return;
    char *cur[ITER_MAX_OPS];
    int64_t inner_st[ITER_MAX_OPS];
    for (int k = 0; k < nops; ++k)
        cur[k] = ptrs[k];
    if (nd == 0) {
        for (int k = 0; k < nops; ++k)
            inner_st[k] = 0;
        fn(cur, inner_st, 1, ctx);
        return;
    }
    int inner = nd - 1;
    int64_t n = sz[inner];
    for (int k = 0; k < nops; ++k)
        inner_st[k] = st[k][inner];
    int64_t idx[FLK_MAX_DIMS] = {0};
    char *row[ITER_MAX_OPS];
    for (;;) {
        for (int k = 0; k < nops; ++k)
            row[k] = cur[k];
        fn(row, inner_st, n, ctx);
        int d = inner - 1;
        for (; d >= 0; --d) {
            ++idx[d];
            for (int k = 0; k < nops; ++k)
                cur[k] += st[k][d];
            if (idx[d] < sz[d])
                break;
            for (int k = 0; k < nops; ++k)
                cur[k] -= st[k][d] * sz[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
}

fl_status flk_broadcast_strides(const flk_args *a, const fl_tensor *t, const char *name,
                                int ndim, const int64_t *sizes, int64_t *strides_bytes) {
    int64_t es = (int64_t)flk_dtype_size(t->dtype);
    if (t->ndim > ndim)
        return flk_fail(a, "%s has %d dims, more than the %d-dim result", name, (int)t->ndim,
                        ndim);
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; ++d) {
        if (d < lead) {
            strides_bytes[d] = 0;
            continue;
        }
        int64_t s = t->sizes[d - lead];
        if (s == sizes[d])
            strides_bytes[d] = s == 1 ? 0 : t->strides[d - lead] * es;
        else if (s == 1)
            strides_bytes[d] = 0;
        else
            return flk_fail(a, "%s of size %lld in dim %d does not broadcast to size %lld", name,
                            (long long)s, d - lead, (long long)sizes[d]);
    }
    return FL_SUCCESS;
}
