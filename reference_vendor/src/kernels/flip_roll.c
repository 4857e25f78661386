/*
 * flip_roll.c -- flip (reverse along dims) and roll (cyclic shift along dims,
 * or of the flattened tensor): every output element is copied from the input
 * element its index maps to.
 */
#include "fl_kernel.h"
#include "util/pack.h"

/* advance idx (row-major) over sizes; 0 when wrapped around */
static int next_index(int64_t *idx, const int64_t *sizes, int ndim) {
    for (int d = ndim - 1; d >= 0; --d) {
        if (++idx[d] < sizes[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

/* ---- flip / roll -------------------------------------------------------------------- */

/* out[i] = self[src(i)] where src maps each dim by (i + shift) mod size or
 * size - 1 - i (flip) */
typedef struct dim_map {
    uint8_t flip[FLK_MAX_DIMS];
    int64_t shift[FLK_MAX_DIMS];
} dim_map;

static void copy_remapped(const fl_tensor *self, const fl_tensor *out, const dim_map *m) {
    if (flk_numel(out) == 0)
        return;
    int64_t idx[FLK_MAX_DIMS] = {0}, src[FLK_MAX_DIMS];
    do {
        for (int32_t d = 0; d < out->ndim; ++d) {
            const int64_t s = out->sizes[d];
            src[d] = m->flip[d] ? s - 1 - idx[d] : ((idx[d] - m->shift[d]) % s + s) % s;
        }
        memcpy(flk_elem_ptr(out, idx), flk_elem_ptr(self, src), flk_dtype_size(out->dtype));
    } while (next_index(idx, out->sizes, out->ndim));
}

/* flip(self, dims) */
FLK_KERNEL_FN(k_flip) {
    flk_args a;
    const fl_tensor *self, *out;
    const int64_t *dims;
    uint32_t nd;
    dim_map m;
    memset(&m, 0, sizeof m);
    FLK_TRY(flk_args_init(&a, "flip", args, nargs, 3, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int_list(&a, 1, "dims", &dims, &nd));
    FLK_TRY(flk_get_tensor(&a, 2, "out", &out));
    for (uint32_t k = 0; k < nd; ++k) {
        int32_t d;
        FLK_TRY(flk_wrap_dim(&a, dims[k], self->ndim, &d));
        if (self->ndim && m.flip[d])
            return flk_fail(&a, "dim %d appears multiple times in the list of dims", (int)d);
        m.flip[d] = self->ndim > 0;
    }
    copy_remapped(self, out, &m);
    return FL_SUCCESS;
}
FLK_REGISTER("flip", FLK_REAL_TYPES, k_flip);

/* roll of the flattened tensor (logical order), shape kept */
static fl_status roll_flat(const flk_args *a, const fl_tensor *self, const fl_tensor *out,
                           int64_t shift) {
    const int64_t n = flk_numel(self);
    if (n == 0)
        return FL_SUCCESS;
    const size_t es = flk_dtype_size(self->dtype);
    char *src, *dst = (char *)flk_alloc((size_t)n * es);
    if (!dst)
        return flk_fail(a, "out of host memory rolling %lld elements", (long long)n);
    fl_status st = ref_pack(a, self, self->dtype, (void **)&src);
    if (st == FL_SUCCESS) {
        const int64_t k = ((shift % n) + n) % n;
        memcpy(dst + (size_t)k * es, src, (size_t)(n - k) * es);
        memcpy(dst, src + (size_t)(n - k) * es, (size_t)k * es);
        ref_unpack(out, self->dtype, dst);
    }
    flk_free(src);
    flk_free(dst);
    return st;
}

/* roll(self, shifts, dims): no dims rolls the flattened tensor */
FLK_KERNEL_FN(k_roll) {
    flk_args a;
    const fl_tensor *self, *out;
    const int64_t *shifts, *dims;
    uint32_t ns, nd;
    dim_map m;
    memset(&m, 0, sizeof m);
    FLK_TRY(flk_args_init(&a, "roll", args, nargs, 4, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "self", &self));
    FLK_TRY(flk_get_int_list(&a, 1, "shifts", &shifts, &ns));
    FLK_TRY(flk_get_int_list(&a, 2, "dims", &dims, &nd));
    FLK_TRY(flk_get_tensor(&a, 3, "out", &out));
    if (nd == 0 && ns == 1)
        return roll_flat(&a, self, out, shifts[0]);
    if (nd != ns)
        return flk_fail(&a, "shifts (%u) and dims (%u) must have the same length", ns, nd);
    for (uint32_t k = 0; k < nd; ++k) {
        int32_t d;
        FLK_TRY(flk_wrap_dim(&a, dims[k], self->ndim, &d));
        m.shift[d] += shifts[k];
    }
    copy_remapped(self, out, &m);
    return FL_SUCCESS;
}
FLK_REGISTER("roll", FLK_REAL_TYPES, k_roll);
