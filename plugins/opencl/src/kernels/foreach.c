/*
 * foreach.c -- the in-place tensor-list ops torch.optim's foreach paths call
 * (Adam/AdamW: _foreach_add_.Scalar, _foreach_lerp_.Scalar,
 * _foreach_addcmul_.Scalar, _foreach_div_.ScalarList ...), one elementwise
 * launch per list entry (elementwise.h).  Entry k of every list has one
 * float dtype and one shape; every entry is checked before the first launch,
 * so a declined call has enqueued nothing and the runtime runs PyTorch's
 * per-tensor loop instead.
 */
#include "elementwise.h"

#define FLOATS CLK_FLOATS

enum { FE_UNARY, FE_BINARY, FE_TERNARY };
enum { FE_NO_SCALAR = 0, FE_ONE_SCALAR = 1, FE_SCALAR_PER_ENTRY = 2 };

typedef struct fe_spec {
    const char *name;
    int kind;          /* FE_UNARY: op(self; s), FE_BINARY: op(self, list 1; s), FE_TERNARY: op(self, 1, 2; s) */
    int code;          /* the clk.h op code */
    uint32_t nlists;   /* tensor lists first (self, operands, or `out` last for the out= form) */
    int scalars;
    int out_list;      /* the last list is the output (_foreach_sqrt.out) */
} fe_spec;

static fl_status check_entry(const flk_args *a, const fl_tensor *self, const fl_tensor *t, uint32_t list,
                             uint32_t k) {
    if (!(CLK_FLOATS & FLK_DT(t->dtype)) || t->dtype != self->dtype)
        return flk_decline(a, "list %u entry %u is %s (one float dtype per entry)", list, k, flk_dtype_name(t->dtype));
    if (!flk_same_sizes(t, self))
        return flk_decline(a, "list %u entry %u has another shape than self's", list, k);
    if (t->ndim > CLK_MAX_DIMS)
        return flk_decline(a, "list %u entry %u has %d dimensions", list, k, t->ndim);
    if (t != self && flk_may_overlap(t, self) && !flk_same_view(t, self))
        return flk_decline(a, "list %u entry %u partly overlaps self", list, k);
    return FL_SUCCESS;
}

static fl_status fe_run(const fe_spec *spec, const fl_arg *args, uint32_t nargs, flk_ctx *ctx) {
    flk_args a;
    const fl_tensor *const *lists[3] = {NULL, NULL, NULL};
    uint32_t n = 0, count;
    FLK_TRY(flk_args_init(&a, spec->name, args, nargs, spec->nlists + (spec->scalars ? 1u : 0u), ctx));
    for (uint32_t i = 0; i < spec->nlists; i++) {
        FLK_TRY(flk_get_tensor_list(&a, i, i ? "tensors" : "self", 0, &lists[i], &count));
        if (i && count != n)
            return flk_fail(&a, "list %u has %u tensors, self %u", i, count, n);
        n = count;
    }
    double scalar = 0;
    const double *per_entry = NULL;
    if (spec->scalars == FE_ONE_SCALAR) {
        FLK_TRY(flk_get_double(&a, spec->nlists, "scalar", &scalar));
    } else if (spec->scalars == FE_SCALAR_PER_ENTRY) {
        FLK_TRY(flk_get_double_list(&a, spec->nlists, "scalars", &per_entry, &count));
        if (count != n)
            return flk_fail(&a, "%u scalars for %u tensors", count, n);
    }
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t i = 0; i < spec->nlists; i++)
            FLK_TRY(check_entry(&a, lists[0][k], lists[i][k], i, k));
        FLK_TRY(clk_need(ctx, CLK_EW, lists[0][k]->dtype));
    }
    for (uint32_t k = 0; k < n; k++) {
        const fl_tensor *self = lists[0][k];
        const fl_tensor *out = spec->out_list ? lists[spec->nlists - 1][k] : self;
        double s = per_entry ? per_entry[k] : scalar;
        if (spec->kind == FE_UNARY)
            FLK_TRY(ew_unary(&a, out, self, spec->code, s, 1));   /* p1: U_ADD's alpha */
        else if (spec->kind == FE_BINARY)
            FLK_TRY(ew_binary(&a, out, ew_tensor(self), ew_tensor(lists[1][k]), spec->code, s, 0));
        else
            FLK_TRY(ew_ternary(&a, out, self, lists[1][k], ew_tensor(lists[2][k]), spec->code, s));
    }
    return FL_SUCCESS;
}

#define FE_OP(ID, NAME, KIND, CODE, NLISTS, SCALARS, OUT_LIST)                              \
    static const fe_spec fe_spec_##ID = {NAME, KIND, CLK_##CODE, NLISTS, SCALARS, OUT_LIST}; \
    FLK_KERNEL_FN(k_##ID) { return fe_run(&fe_spec_##ID, args, nargs, ctx); }               \
    FLK_REGISTER(NAME, FLOATS, k_##ID);

FE_OP(add_scalar, "_foreach_add_.Scalar", FE_UNARY, U_ADD, 1, FE_ONE_SCALAR, 0)
FE_OP(mul_scalar, "_foreach_mul_.Scalar", FE_UNARY, U_MUL, 1, FE_ONE_SCALAR, 0)
FE_OP(div_scalarlist, "_foreach_div_.ScalarList", FE_UNARY, U_DIV, 1, FE_SCALAR_PER_ENTRY, 0)
FE_OP(sqrt_, "_foreach_sqrt_", FE_UNARY, U_SQRT, 1, FE_NO_SCALAR, 0)
FE_OP(sqrt_out, "_foreach_sqrt.out", FE_UNARY, U_SQRT, 2, FE_NO_SCALAR, 1)   /* (self, *, out) */
FE_OP(add_list, "_foreach_add_.List", FE_BINARY, B_ADD, 2, FE_ONE_SCALAR, 0) /* (self, other, *, alpha) */
FE_OP(lerp_scalar, "_foreach_lerp_.Scalar", FE_BINARY, B_LERP, 2, FE_ONE_SCALAR, 0)
FE_OP(addcmul_scalar, "_foreach_addcmul_.Scalar", FE_TERNARY, T_ADDCMUL, 3, FE_ONE_SCALAR, 0)
FE_OP(addcdiv_scalar, "_foreach_addcdiv_.Scalar", FE_TERNARY, T_ADDCDIV, 3, FE_ONE_SCALAR, 0)
FE_OP(addcdiv_scalarlist, "_foreach_addcdiv_.ScalarList", FE_TERNARY, T_ADDCDIV, 3, FE_SCALAR_PER_ENTRY, 0)
