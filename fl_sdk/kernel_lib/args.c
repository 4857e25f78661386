/*
 * args.c -- checked access to a kernel's arguments (fl_kernel.h section 5):
 * every failure is a message naming the op and the argument.
 */
#include "fl_kernel.h"

#include <stdio.h>

static const char *kind_name(int32_t k) {
    switch (k) {
    case FL_ARG_NONE: return "None";
    case FL_ARG_TENSOR: return "Tensor";
    case FL_ARG_INT: return "int";
    case FL_ARG_FLOAT: return "float";
    case FL_ARG_BOOL: return "bool";
    case FL_ARG_INT_LIST: return "int[]";
    case FL_ARG_FLOAT_LIST: return "float[]";
    case FL_ARG_BOOL_LIST: return "bool[]";
    case FL_ARG_TENSOR_LIST: return "Tensor[]";
    case FL_ARG_STRING: return "str";
    default: return "unknown kind";
    }
}

fl_status flk_args_init(flk_args *a, const char *op, const fl_arg *args, uint32_t nargs,
                        uint32_t expected, flk_ctx *ctx) {
    a->args = args;
    a->nargs = nargs;
    a->ctx = ctx;
    a->op = op;
    if (nargs != expected)
        return flk_fail(a, "expected %u arguments (schema arguments then outputs), got %u",
                        expected, nargs);
    if (nargs > 0 && !args)
        return flk_fail(a, "argument array is NULL");
    return FL_SUCCESS;
}

int flk_arg_is_none(const flk_args *a, uint32_t i) {
    return i >= a->nargs || a->args[i].kind == FL_ARG_NONE;
}

static fl_status wrong_kind(const flk_args *a, uint32_t i, const char *name, const char *want) {
    int32_t k = i < a->nargs ? a->args[i].kind : FL_ARG_NONE;
    return flk_fail(a, "argument %u (%s) must be %s, got %s", i, name, want, kind_name(k));
}

static fl_status check_tensor(const flk_args *a, uint32_t i, const char *name,
                              const fl_tensor *t) {
    if (!t)
        return flk_fail(a, "argument %u (%s) is a NULL tensor", i, name);
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides))
        return flk_fail(a, "argument %u (%s): fl_tensor.struct_size %zu is too small", i, name,
                        t->struct_size);
    if (!flk_dtype_valid(t->dtype))
        return flk_fail(a, "argument %u (%s): invalid dtype %d", i, name, (int)t->dtype);
    if (t->dtype == FL_COMPLEX64)
        return flk_fail(a, "argument %u (%s): complex64 is not supported by this kernel", i,
                        name);
    if (t->ndim < 0 || t->ndim > FLK_MAX_DIMS)
        return flk_fail(a, "argument %u (%s): %d dims not supported (max %d)", i, name,
                        (int)t->ndim, FLK_MAX_DIMS);
    if (t->ndim > 0 && (!t->sizes || !t->strides))
        return flk_fail(a, "argument %u (%s): NULL sizes/strides", i, name);
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; ++d) {
        if (t->sizes[d] < 0)
            return flk_fail(a, "argument %u (%s): negative size %lld in dim %d", i, name,
                            (long long)t->sizes[d], (int)d);
        n *= t->sizes[d];
    }
    if (n > 0 && t->base == 0)
        return flk_fail(a, "argument %u (%s): NULL data pointer", i, name);
    return FL_SUCCESS;
}

fl_status flk_get_tensor(const flk_args *a, uint32_t i, const char *name, const fl_tensor **out) {
    if (i >= a->nargs || a->args[i].kind != FL_ARG_TENSOR)
        return wrong_kind(a, i, name, "a Tensor");
    FLK_TRY(check_tensor(a, i, name, a->args[i].value.tensor));
    *out = a->args[i].value.tensor;
    return FL_SUCCESS;
}

fl_status flk_get_opt_tensor(const flk_args *a, uint32_t i, const char *name,
                             const fl_tensor **out) {
    if (flk_arg_is_none(a, i)) {
        *out = NULL;
        return FL_SUCCESS;
    }
    return flk_get_tensor(a, i, name, out);
}

static int scalar_from_arg(const fl_arg *arg, flk_scalar *s) {
    switch (arg->kind) {
    case FL_ARG_INT:
        s->kind = FL_ARG_INT;
        s->i = arg->value.i;
        s->f = (double)arg->value.i;
        return 1;
    case FL_ARG_BOOL:
        s->kind = FL_ARG_BOOL;
        s->i = arg->value.i != 0;
        s->f = (double)s->i;
        return 1;
    case FL_ARG_FLOAT:
        s->kind = FL_ARG_FLOAT;
        s->f = arg->value.f;
        s->i = flk_double_to_i64(arg->value.f);
        return 1;
    default:
        return 0;
    }
}

fl_status flk_get_operand(const flk_args *a, uint32_t i, const char *name, flk_operand *out) {
    memset(out, 0, sizeof *out);
    if (i < a->nargs && a->args[i].kind == FL_ARG_TENSOR)
        return flk_get_tensor(a, i, name, &out->t);
    if (i < a->nargs && scalar_from_arg(&a->args[i], &out->s))
        return FL_SUCCESS;
    return wrong_kind(a, i, name, "a Tensor or a scalar");
}

fl_status flk_get_scalar(const flk_args *a, uint32_t i, const char *name, flk_scalar *out) {
    if (i < a->nargs && scalar_from_arg(&a->args[i], out))
        return FL_SUCCESS;
    return wrong_kind(a, i, name, "a Scalar (int, float or bool)");
}

fl_status flk_get_opt_scalar(const flk_args *a, uint32_t i, const char *name, int *present,
                             flk_scalar *out) {
    *present = 0;
    if (flk_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return flk_get_scalar(a, i, name, out);
}

fl_status flk_get_int(const flk_args *a, uint32_t i, const char *name, int64_t *out) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_INT || a->args[i].kind == FL_ARG_BOOL)) {
        *out = a->args[i].value.i;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "an int");
}

fl_status flk_get_opt_int(const flk_args *a, uint32_t i, const char *name, int *present,
                          int64_t *out) {
    *present = 0;
    if (flk_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return flk_get_int(a, i, name, out);
}

fl_status flk_get_double(const flk_args *a, uint32_t i, const char *name, double *out) {
    flk_scalar s;
    if (i < a->nargs && scalar_from_arg(&a->args[i], &s)) {
        *out = s.f;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a float");
}

fl_status flk_get_bool(const flk_args *a, uint32_t i, const char *name, int *out) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_BOOL || a->args[i].kind == FL_ARG_INT)) {
        *out = a->args[i].value.i != 0;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a bool");
}

fl_status flk_out_variant(const char *op, const fl_arg *args, uint32_t nargs,
                          flk_ctx *ctx, flk_fn fn) {
    const fl_tensor *arg = nargs >= 2 && args[nargs - 2].kind == FL_ARG_TENSOR
                               ? args[nargs - 2].value.tensor : NULL;
    const fl_tensor *res = nargs >= 2 && args[nargs - 1].kind == FL_ARG_TENSOR
                               ? args[nargs - 1].value.tensor : NULL;
    if (!arg || !res || arg->base != res->base || arg->byte_offset != res->byte_offset)
        return flk_kernel_fail(ctx, "%s: expected the out= argument followed by the same tensor "
                                    "as the result", op);
    return fn(args, nargs - 1, ctx);
}

fl_status flk_get_string(const flk_args *a, uint32_t i, const char *name, const char **out) {
    if (i < a->nargs && a->args[i].kind == FL_ARG_STRING && a->args[i].value.str) {
        *out = a->args[i].value.str;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a string");
}

fl_status flk_get_tensor_list(const flk_args *a, uint32_t i, const char *name, int allow_none,
                              const fl_tensor *const **out, uint32_t *count) {
    if (i >= a->nargs || a->args[i].kind != FL_ARG_TENSOR_LIST)
        return wrong_kind(a, i, name, "a Tensor[]");
    *out = a->args[i].value.tensors;
    *count = a->args[i].count;
    for (uint32_t k = 0; k < *count; ++k) {
        if (!(*out)[k]) {
            if (!allow_none)
                return flk_fail(a, "%s[%u] is None; a tensor is required", name, k);
            continue;
        }
        FLK_TRY(check_tensor(a, i, name, (*out)[k]));
    }
    return FL_SUCCESS;
}

fl_status flk_get_int_list(const flk_args *a, uint32_t i, const char *name,
                           const int64_t **vals, uint32_t *count) {
    if (i < a->nargs && a->args[i].kind == FL_ARG_INT_LIST) {
        if (a->args[i].count > 0 && !a->args[i].value.ints)
            return flk_fail(a, "argument %u (%s): NULL list", i, name);
        *vals = a->args[i].value.ints;
        *count = a->args[i].count;
        return FL_SUCCESS;
    }
    if (i < a->nargs && a->args[i].kind == FL_ARG_INT) {
        *vals = &a->args[i].value.i;
        *count = 1;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "an int list");
}

fl_status flk_get_opt_int_list(const flk_args *a, uint32_t i, const char *name, int *present,
                               const int64_t **vals, uint32_t *count) {
    *present = 0;
    *vals = NULL;
    *count = 0;
    if (flk_arg_is_none(a, i))
        return FL_SUCCESS;
    *present = 1;
    return flk_get_int_list(a, i, name, vals, count);
}

fl_status flk_get_bool_list(const flk_args *a, uint32_t i, const char *name,
                            const int64_t **vals, uint32_t *count) {
    if (i < a->nargs && (a->args[i].kind == FL_ARG_BOOL_LIST || a->args[i].kind == FL_ARG_INT_LIST)) {
        if (a->args[i].count > 0 && !a->args[i].value.ints)
            return flk_fail(a, "argument %u (%s): NULL list", i, name);
        *vals = a->args[i].value.ints;
        *count = a->args[i].count;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a bool list");
}

fl_status flk_get_double_list(const flk_args *a, uint32_t i, const char *name,
                              const double **vals, uint32_t *count) {
    if (i < a->nargs && a->args[i].kind == FL_ARG_FLOAT_LIST) {
        if (a->args[i].count > 0 && !a->args[i].value.floats)
            return flk_fail(a, "argument %u (%s): NULL list", i, name);
        *vals = a->args[i].value.floats;
        *count = a->args[i].count;
        return FL_SUCCESS;
    }
    return wrong_kind(a, i, name, "a float list");
}

fl_status flk_get_generator(const flk_args *a, uint32_t i, const char *name, uint64_t *seed,
                            uint64_t *offset) {
    *seed = 0;
    *offset = 0;
    if (flk_arg_is_none(a, i))
        return FL_SUCCESS;
    if (a->args[i].kind != FL_ARG_INT_LIST)
        return wrong_kind(a, i, name, "a generator state {seed, offset} (int list) or None");
    if (a->args[i].count != 2 || !a->args[i].value.ints)
        return flk_fail(a, "argument %u (%s): generator state must be {seed, offset}, got %u ints",
                        i, name, a->args[i].count);
    *seed = (uint64_t)a->args[i].value.ints[0];
    *offset = (uint64_t)a->args[i].value.ints[1];
    return FL_SUCCESS;
}

fl_status flk_get_opt_dtype(const flk_args *a, uint32_t i, const char *name, int *present,
                            int32_t *out) {
    int64_t v = 0;
    FLK_TRY(flk_get_opt_int(a, i, name, present, &v));
    if (*present) {
        if (!flk_dtype_valid((int32_t)v) || v != (int32_t)v)
            return flk_fail(a, "argument %u (%s): %lld is not an fl_dtype", i, name, (long long)v);
        *out = (int32_t)v;
    }
    return FL_SUCCESS;
}

fl_status flk_wrap_dim(const flk_args *a, int64_t dim, int32_t ndim, int32_t *out) {
    int64_t n = ndim > 0 ? ndim : 1;
    int64_t d = dim < 0 ? dim + n : dim;
    if (d < 0 || d >= n)
        return flk_fail(a, "dimension %lld out of range for a %d-dim tensor", (long long)dim,
                        (int)ndim);
    *out = (int32_t)d;
    return FL_SUCCESS;
}

fl_status flk_check_dtype(const flk_args *a, const fl_tensor *t, const char *name, uint64_t mask) {
    if (!(mask & FLK_DT(t->dtype)))
        return flk_fail(a, "%s: dtype %s is not supported", name, flk_dtype_name(t->dtype));
    return FL_SUCCESS;
}
