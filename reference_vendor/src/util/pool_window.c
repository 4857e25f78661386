/*
 * pool_window.c -- pooling window arguments and output sizes (see
 * pool_window.h).
 */
#include "util/pool_window.h"

fl_status ref_pool_pair_arg(const flk_args *a, uint32_t i, const char *name, int allow_empty,
                            int64_t *v0, int64_t *v1, int *empty) {
    const int64_t *v;
    uint32_t n;
    FLK_TRY(flk_get_int_list(a, i, name, &v, &n));
    if (empty)
        *empty = 0;
    if (n == 0 && allow_empty) {
        *empty = 1;
        return FL_SUCCESS;
    }
    if (n != 1 && n != 2)
        return flk_fail(a, "%s must have 1 or 2 entries, got %u", name, n);
    *v0 = v[0];
    *v1 = n == 2 ? v[1] : v[0];
    return FL_SUCCESS;
}

/* kernel_size, stride ([] = kernel_size), padding at args ki, ki+1, ki+2 */
fl_status ref_pool_window_args(const flk_args *a, uint32_t ki, const ref_pool_window *w) {
    int empty;
    FLK_TRY(ref_pool_pair_arg(a, ki, "kernel_size", 0, w->kh, w->kw, NULL));
    FLK_TRY(ref_pool_pair_arg(a, ki + 1, "stride", 1, w->sh, w->sw, &empty));
    if (empty) {
        *w->sh = *w->kh;
        *w->sw = *w->kw;
    }
    return ref_pool_pair_arg(a, ki + 2, "padding", 0, w->ph, w->pw, NULL);
}

int64_t ref_pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                          int ceil_mode) {
    int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        --out;
    return out;
}
