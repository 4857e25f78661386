/*
 * launch_args.c -- checking a launch's arguments against the driver's live
 * allocations, and deep-copying them for work queued past launch_kernel's
 * return (fl_driver.h section 6).
 */
#include "fl_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct checker {
    const fld_memory *memory;
    int32_t device;
    const char *op;
    fld_arg_plan *plan;
} checker;

/* "launch_kernel(op): argument i[ entry j]: what" */
static fl_status arg_fail(const checker *c, fl_status status, uint32_t argi, int64_t entry, const char *what) {
    char where[48] = "";
    if (entry >= 0)
        snprintf(where, sizeof where, " entry %lld", (long long)entry);
    return fld_fail(status, "launch_kernel(%s): argument %u%s: %s", c->op, argi, where, what);
}

static fl_status check_tensor(checker *c, const fl_tensor *t, uint32_t argi, int64_t entry) {
    const char *problem = fld_tensor_problem(t);
    if (problem)
        return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, entry, problem);
    uint64_t extent;
    if (!fld_tensor_extent(t, &extent))
        return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, entry,
                        "its extent (sizes times strides times itemsize) overflows 64 bits");
    if (extent) {   /* an empty tensor touches no memory; PyTorch gives those a null base */
        char call[128];
        if (entry >= 0)
            snprintf(call, sizeof call, "launch_kernel(%s): argument %u entry %lld", c->op, argi, (long long)entry);
        else
            snprintf(call, sizeof call, "launch_kernel(%s): argument %u", c->op, argi);
        fl_status st = fld_check_range(c->memory, c->device, t->base, t->byte_offset, extent, call, "tensor base");
        if (st != FL_SUCCESS)
            return st;
    }
    c->plan->tensors++;
    c->plan->bytes += extent;
    c->plan->words += 2 * (size_t)t->ndim;
    return FL_SUCCESS;
}

static fl_status check_list(checker *c, const fl_arg *a, uint32_t argi) {
    if (a->count && !a->value.ints)
        return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, -1, "list with count > 0 has a NULL pointer");
    if (a->kind != FL_ARG_TENSOR_LIST) {
        c->plan->words += a->count;
        return FL_SUCCESS;
    }
    c->plan->ptrs += a->count;
    for (uint32_t j = 0; j < a->count; j++) {
        const fl_tensor *t = a->value.tensors[j];
        fl_status st = t ? check_tensor(c, t, argi, j) : FL_SUCCESS;    /* NULL: a None of Tensor?[] */
        if (st != FL_SUCCESS)
            return st;
    }
    return FL_SUCCESS;
}

static fl_status check_arg(checker *c, const fl_arg *a, uint32_t argi) {
    switch (a->kind) {
    case FL_ARG_NONE:
    case FL_ARG_INT:
    case FL_ARG_FLOAT:
    case FL_ARG_BOOL:
        return FL_SUCCESS;
    case FL_ARG_TENSOR:
        if (!a->value.tensor)
            return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, -1, "tensor argument is NULL (use FL_ARG_NONE)");
        return check_tensor(c, a->value.tensor, argi, -1);
    case FL_ARG_INT_LIST:
    case FL_ARG_FLOAT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_TENSOR_LIST:
        return check_list(c, a, argi);
    case FL_ARG_STRING:
        if (!a->value.str)
            return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, -1, "string argument is NULL");
        c->plan->chars += strlen(a->value.str) + 1;
        return FL_SUCCESS;
    default:
        return arg_fail(c, FL_ERROR_INVALID_VALUE, argi, -1, "unknown fl_arg kind");
    }
}

fl_status fld_check_args(const fld_memory *memory, int32_t device, const char *op, const fl_arg *args,
                         uint32_t nargs, fld_arg_plan *plan) {
    *plan = (fld_arg_plan){0};
    if (nargs && !args)
        return fld_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): args is NULL with nargs=%u", op, nargs);
    checker c = {memory, device, op, plan};
    for (uint32_t i = 0; i < nargs; i++) {
        fl_status st = check_arg(&c, &args[i], i);
        if (st != FL_SUCCESS)
            return st;
    }
    return FL_SUCCESS;
}

/* ---- the deep copy ------------------------------------------------------------- */

/* Cursors into the single block: all 8-byte-aligned parts first, strings last. */
typedef struct copy_cursor {
    fld_rebase_fn rebase;
    void *ctx;
    fl_tensor *tensor;
    const fl_tensor **ptr;
    int64_t *word;
    char *chars;
} copy_cursor;

static void *take_words(copy_cursor *c, const void *src, size_t n) {
    int64_t *dst = c->word;
    if (n)
        memcpy(dst, src, n * sizeof *dst);
    c->word += n;
    return dst;
}

static const fl_tensor *copy_tensor(copy_cursor *c, const fl_tensor *src) {
    fl_tensor *t = c->tensor++;
    t->struct_size = sizeof *t;
    t->base = c->rebase ? c->rebase(c->ctx, src) : src->base;
    t->byte_offset = src->byte_offset;
    t->dtype = src->dtype;
    t->ndim = src->ndim;
    t->sizes = take_words(c, src->sizes, (size_t)src->ndim);
    t->strides = take_words(c, src->strides, (size_t)src->ndim);
    return t;
}

static void copy_arg(copy_cursor *c, fl_arg *dst, const fl_arg *src) {
    *dst = *src;
    switch (src->kind) {
    case FL_ARG_TENSOR:
        dst->value.tensor = copy_tensor(c, src->value.tensor);
        break;
    case FL_ARG_INT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_FLOAT_LIST: /* int64 and double are both 8 bytes */
        dst->value.ints = take_words(c, src->value.ints, src->count);
        break;
    case FL_ARG_TENSOR_LIST: {
        const fl_tensor **list = c->ptr;
        c->ptr += src->count;
        for (uint32_t j = 0; j < src->count; j++)
            list[j] = src->value.tensors[j] ? copy_tensor(c, src->value.tensors[j]) : NULL;
        dst->value.tensors = list;
        break;
    }
    case FL_ARG_STRING: {
        size_t n = strlen(src->value.str) + 1;
        memcpy(c->chars, src->value.str, n);
        dst->value.str = c->chars;
        c->chars += n;
        break;
    }
    default:
        break;
    }
}

fl_arg *fld_copy_args(const fld_arg_plan *plan, const fl_arg *args, uint32_t nargs, fld_rebase_fn rebase,
                      void *ctx) {
    size_t head = nargs * sizeof(fl_arg), tens = plan->tensors * sizeof(fl_tensor);
    size_t ptrs = plan->ptrs * sizeof(fl_tensor *), words = plan->words * sizeof(int64_t);
    char *block = malloc(head + tens + ptrs + words + plan->chars + 1);
    if (!block)
        return NULL;
    copy_cursor c = {
        .rebase = rebase,
        .ctx = ctx,
        .tensor = (fl_tensor *)(block + head),
        .ptr = (const fl_tensor **)(block + head + tens),
        .word = (int64_t *)(block + head + tens + ptrs),
        .chars = block + head + tens + ptrs + words,
    };
    fl_arg *out = (fl_arg *)block;
    for (uint32_t i = 0; i < nargs; i++)
        copy_arg(&c, &out[i], &args[i]);
    return out;
}
