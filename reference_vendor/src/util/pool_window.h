/*
 * pool_window.h -- the window arguments of the reference's 2-d pooling
 * kernels (kernels/pool_max.c and kernels/pool_avg.c share them).
 */
#ifndef REF_UTIL_POOL_WINDOW_H
#define REF_UTIL_POOL_WINDOW_H

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* int[1] or int[2] argument as a pair; allow_empty: [] sets *empty */
fl_status ref_pool_pair_arg(const flk_args *a, uint32_t i, const char *name, int allow_empty,
                            int64_t *v0, int64_t *v1, int *empty);
typedef struct ref_pool_window {
    int64_t *kh, *kw, *sh, *sw, *ph, *pw;
} ref_pool_window;
/* kernel_size, stride ([] means kernel_size) and padding at args ki .. ki+2 */
fl_status ref_pool_window_args(const flk_args *a, uint32_t ki, const ref_pool_window *w);
/* PyTorch's pooling output size (ceil_mode windows must start inside input + pad) */
int64_t ref_pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                          int ceil_mode);

#pragma GCC visibility pop

#endif /* REF_UTIL_POOL_WINDOW_H */
