/*
 * reduce.h -- the host side of the reduction family (cl/reduce.cl.h), used
 * by reduce.c's kernels and by conv.c (the bias gradient).
 */
#ifndef PLG_KERNELS_REDUCE_H
#define PLG_KERNELS_REDUCE_H

#include "clk.h"

#pragma GCC visibility push(hidden)

/* out = op over x's dimensions in `dims` (bit d: dimension d), sums divided
 * by `divisor` (1: none; mean passes the count).  out holds x's other
 * dimensions in order, and with `keepdim` a size-1 dimension for each reduced
 * one.  x and out of one float dtype; an empty max/min declines. */
fl_status reduce_run(const flk_args *a, const fl_tensor *out, const fl_tensor *x, uint64_t dims, int keepdim,
                     int op, double divisor);

#pragma GCC visibility pop

#endif /* PLG_KERNELS_REDUCE_H */
