/*
 * elementwise.c -- the elementwise engine (fl_kernel.h section 8): inputs
 * broadcast to the output, scalars in tensor slots, dtype casts in chunks.
 * An input sharing memory with the output other than as its very view is
 * read from a private copy (flk_unshare; fl_abi.h "ARGUMENTS THAT SHARE
 * MEMORY").
 */
#include "fl_kernel.h"

#include <stdio.h>

#define EW_CHUNK 256

typedef struct ew_state {
    const flk_ew_desc *d;
    int nops;
    int any_cast;
    int cast[FLK_EW_MAX_OPS];
    int32_t tdt[FLK_EW_MAX_OPS]; /* dtype in memory */
    int32_t ldt[FLK_EW_MAX_OPS]; /* dtype the loop uses */
    int32_t via[FLK_EW_MAX_OPS]; /* intermediate dtype, or -1 */
    char *scratch;
    int64_t lsz[FLK_EW_MAX_OPS];
    char *buf[FLK_EW_MAX_OPS];
} ew_state;

/* input chunk -> loop dtype, through the via dtype when there is one */
static void ew_cast_in(const ew_state *s, int k, const char *src, int64_t stride, int64_t m) {
    if (s->via[k] < 0) {
        flk_convert(s->buf[k], s->ldt[k], s->lsz[k], src, s->tdt[k], stride, m);
        return;
    }
    int64_t vsz = (int64_t)flk_dtype_size(s->via[k]);
    flk_convert(s->scratch, s->via[k], vsz, src, s->tdt[k], stride, m);
    flk_convert(s->buf[k], s->ldt[k], s->lsz[k], s->scratch, s->via[k], vsz, m);
}

static void ew_row(char **ptrs, const int64_t *strides, int64_t n, void *vs) {
    ew_state *s = (ew_state *)vs;
    const flk_ew_desc *d = s->d;
    if (!s->any_cast) {
        d->fn(ptrs, strides, n, d->params);
        return;
    }
    char *p[FLK_EW_MAX_OPS];
    int64_t st[FLK_EW_MAX_OPS];
    /* broadcast inputs that need a cast: convert their single element once */
    for (int k = 1; k < s->nops; ++k)
        if (s->cast[k] && strides[k] == 0)
            ew_cast_in(s, k, ptrs[k], 0, 1);
    for (int64_t off = 0; off < n; off += EW_CHUNK) {
        int64_t m = n - off < EW_CHUNK ? n - off : EW_CHUNK;
        for (int k = 0; k < s->nops; ++k) {
            char *src = ptrs[k] + off * strides[k];
            if (!s->cast[k]) {
                p[k] = src;
                st[k] = strides[k];
            } else if (k > 0 && strides[k] == 0) {
                p[k] = s->buf[k];
                st[k] = 0;
            } else {
                p[k] = s->buf[k];
                st[k] = s->lsz[k];
                if (k > 0)
                    ew_cast_in(s, k, src, strides[k], m);
            }
        }
        d->fn(p, st, m, d->params);
        if (s->cast[0])
            flk_convert(ptrs[0] + off * strides[0], s->tdt[0], strides[0], s->buf[0], s->ldt[0],
                        s->lsz[0], m);
    }
}

static fl_status release_unshared(flk_unshared *unshared, int count, fl_status status) {
    for (int i = 0; i < count; ++i)
        flk_unshared_free(&unshared[i]);
    return status;
}

fl_status flk_elementwise(const flk_args *a, const flk_ew_desc *d) {
    const fl_tensor *out = d->out;
    int nd = out->ndim;
    int nops = 1 + d->nin;
    if (d->nin < 0 || d->nin > FLK_EW_MAX_INPUTS)
        return flk_fail(a, "internal: too many elementwise inputs");
    if (!flk_dtype_valid(d->out_dtype) || d->out_dtype == FL_COMPLEX64)
        return flk_fail(a, "internal: bad loop dtype");

    int64_t strides[FLK_EW_MAX_OPS][FLK_MAX_DIMS];
    char *ptrs[FLK_EW_MAX_OPS];
    _Alignas(64) char scalar_buf[FLK_EW_MAX_OPS][16];
    _Alignas(64) char chunk_buf[FLK_EW_MAX_OPS][EW_CHUNK * 8];
    _Alignas(64) char scratch[EW_CHUNK * 8];
    flk_unshared unshared[FLK_EW_MAX_INPUTS];
    int nunshared = 0;
    ew_state s;
    memset(&s, 0, sizeof s);
    s.d = d;
    s.nops = nops;
    s.scratch = scratch;
    for (int k = 0; k < FLK_EW_MAX_OPS; ++k)
        s.via[k] = -1;

    int64_t numel = flk_numel(out);
    int64_t oes = (int64_t)flk_dtype_size(out->dtype);
    for (int i = 0; i < nd; ++i) {
        strides[0][i] = out->strides[i] * oes;
        /* an empty output may have any strides: nothing is written */
        if (numel > 0 && out->sizes[i] > 1 && out->strides[i] == 0)
            return flk_fail(a, "the output has more than one element at the same memory "
                               "location (stride 0 in dim %d)", i);
    }
    ptrs[0] = (char *)flk_data(out);
    s.tdt[0] = out->dtype;
    s.ldt[0] = d->out_dtype;

    for (int k = 1; k < nops; ++k) {
        const flk_operand *op = &d->in[k - 1];
        int32_t ldt = d->in_dtypes[k - 1];
        if (!flk_dtype_valid(ldt) || ldt == FL_COMPLEX64)
            return release_unshared(unshared, nunshared, flk_fail(a, "internal: bad loop dtype"));
        s.ldt[k] = ldt;
        if (op->t) {
            char name[32];
            snprintf(name, sizeof name, "input %d", k - 1);
            const fl_tensor *t = op->t;
            if (numel > 0) {    /* an input in the output's memory: read from a copy */
                fl_status st = flk_unshare(a, out, op->t, 0, &unshared[nunshared], &t);
                if (st != FL_SUCCESS)
                    return release_unshared(unshared, nunshared, st);
                nunshared += unshared[nunshared].memory != NULL;
            }
            fl_status st = flk_broadcast_strides(a, t, name, nd, out->sizes, strides[k]);
            if (st != FL_SUCCESS)
                return release_unshared(unshared, nunshared, st);
            ptrs[k] = (char *)flk_data(t);
            s.tdt[k] = t->dtype;
            if (d->in_via && d->in_via[k - 1] >= 0 && d->in_via[k - 1] != s.tdt[k] &&
                d->in_via[k - 1] != ldt) {
                if (!flk_dtype_valid(d->in_via[k - 1]) || d->in_via[k - 1] == FL_COMPLEX64)
                    return release_unshared(unshared, nunshared, flk_fail(a, "internal: bad intermediate dtype"));
                s.via[k] = d->in_via[k - 1];
            }
        } else {
            int32_t sdt = ldt;
            if (d->in_via && d->in_via[k - 1] >= 0 && d->in_via[k - 1] != ldt &&
                flk_dtype_valid(d->in_via[k - 1]) && d->in_via[k - 1] != FL_COMPLEX64)
                sdt = d->in_via[k - 1]; /* through the common dtype, like PyTorch */
            if (op->s.kind == FL_ARG_FLOAT)
                flk_store_f64(scalar_buf[k], sdt, op->s.f);
            else
                flk_store_i64(scalar_buf[k], sdt, op->s.i);
            if (sdt != ldt) {
                char tmp[16];
                memcpy(tmp, scalar_buf[k], sizeof tmp);
                flk_convert(scalar_buf[k], ldt, 0, tmp, sdt, 0, 1);
            }
            ptrs[k] = scalar_buf[k];
            for (int i = 0; i < nd; ++i)
                strides[k][i] = 0;
            s.tdt[k] = ldt;
        }
    }
    if (numel == 0)
        return FL_SUCCESS;    /* nothing was copied for an empty output */
    for (int k = 0; k < nops; ++k) {
        s.lsz[k] = (int64_t)flk_dtype_size(s.ldt[k]);
        s.cast[k] = s.tdt[k] != s.ldt[k];
        s.buf[k] = chunk_buf[k];
        s.any_cast |= s.cast[k];
    }
    flk_for_each_row(nd, out->sizes, nops, ptrs, strides, 0, ew_row, &s);
    return release_unshared(unshared, nunshared, FL_SUCCESS);
}
