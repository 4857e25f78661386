/*
 * reduce_dims.c -- reduction dims as a mask (see reduce_dims.h).
 */
#include "util/reduce_dims.h"

fl_status ref_reduce_dim_mask(const flk_args *a, const fl_tensor *in, uint32_t argi,
                              uint8_t *rmask) {
    int present;
    const int64_t *dims;
    uint32_t nd;
    FLK_TRY(flk_get_opt_int_list(a, argi, "dim", &present, &dims, &nd));
    memset(rmask, 0, FLK_MAX_DIMS);
    if (!present || nd == 0) {
        memset(rmask, 1, (size_t)in->ndim);
        return FL_SUCCESS;
    }
    for (uint32_t i = 0; i < nd; ++i) {
        int32_t d;
        FLK_TRY(flk_wrap_dim(a, dims[i], in->ndim, &d));
        if (in->ndim == 0)
            continue;
        if (rmask[d])
            return flk_fail(a, "dim %d appears multiple times in the list of dims", (int)d);
        rmask[d] = 1;
    }
    return FL_SUCCESS;
}
