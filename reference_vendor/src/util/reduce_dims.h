/*
 * reduce_dims.h -- the `dim` argument of the reference's reductions as a
 * mask (kernels/reduce.c and kernels/reduce_packed.c share it).
 */
#ifndef REF_UTIL_REDUCE_DIMS_H
#define REF_UTIL_REDUCE_DIMS_H

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* rmask[d] = 1 for each dim of the optional int[] argument argi ("dim"; a single
 * INT is a list of one); None or [] reduces every dim.  Repeated dims fail. */
fl_status ref_reduce_dim_mask(const flk_args *a, const fl_tensor *in, uint32_t argi,
                              uint8_t *rmask);

#pragma GCC visibility pop

#endif /* REF_UTIL_REDUCE_DIMS_H */
