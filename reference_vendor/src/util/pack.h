/*
 * pack.h -- packing a strided tensor of any real dtype into a contiguous
 * host buffer of a compute dtype and back.
 *
 * The reference's kernels whose access pattern is not elementwise
 * (normalisation, indexing, concatenation, packed reductions) work on packed
 * buffers: one simple row-major loop nest per op instead of a strided
 * variant per layout, and float16/bfloat16 inputs come for free (packed to
 * float64, results rounded once when unpacked).  Reference-specific: it
 * computes on the host.
 */
#ifndef REF_UTIL_PACK_H
#define REF_UTIL_PACK_H

#include "fl_kernel.h"

#pragma GCC visibility push(hidden)

/* A contiguous row-major copy of t's elements converted to dt, flk_alloc'd
 * (free with flk_free); t NULL -> *out NULL and success. */
fl_status ref_pack(const flk_args *a, const fl_tensor *t, int32_t dt, void **out);
/* Write a row-major buffer of dt into t's elements (any strides); no-op for NULL t. */
void ref_unpack(const fl_tensor *t, int32_t dt, const void *buf);
/* n doubles, flk_alloc'd, failing with a message */
fl_status ref_alloc_f64(const flk_args *a, int64_t n, double **out);
/* flk_free each pointer and set it to NULL */
void ref_free_all(void **ptrs, int n);

#pragma GCC visibility pop

#endif /* REF_UTIL_PACK_H */
