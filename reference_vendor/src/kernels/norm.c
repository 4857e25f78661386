/*
 * norm.c -- native_layer_norm, native_group_norm, native_batch_norm
 * and their backwards, for every float dtype.
 *
 * All three are one computation on packed float64 rows: R rows of D
 * elements are normalised by their own (mean, rstd) and scaled by a
 * per-channel affine.  Layer norm: rows are the leading dims, the channel is
 * the column.  Group norm: rows are (n, group), the channel is
 * group * C/G + column / HxW.  Batch norm: the packed [N, C, HxW] input is
 * transposed to C rows of N*HxW, the channel is the row.
 */
#include <math.h>

#include "fl_kernel.h"
#include "util/pack.h"

/* which affine channel an element of a row uses */
typedef struct norm_map {
    int64_t groups;   /* channel = (row % groups) * per_group + column / inner */
    int64_t per_group;
    int64_t inner;
} norm_map;

static inline int64_t norm_channel(const norm_map *m, int64_t row, int64_t col) {
    return (row % m->groups) * m->per_group + col / m->inner;
}

/* Layer norm's map: the channel is the column.  The loops test for it and
 * skip norm_channel's integer divisions, which cost more than the arithmetic
 * on a tiny transformer's 64-wide rows. */
static inline int layer_map(const norm_map *m) { return m->groups == 1 && m->inner == 1; }

/* biased mean and variance of each row */
static void row_moments(const double *x, int64_t R, int64_t D, double *mean, double *var) {
    for (int64_t r = 0; r < R; ++r) {
        const double *xr = x + r * D;
        double s = 0.0, q = 0.0;
        for (int64_t j = 0; j < D; ++j)
            s += xr[j];
        const double mu = D > 0 ? s / (double)D : 0.0;
        for (int64_t j = 0; j < D; ++j)
            q += (xr[j] - mu) * (xr[j] - mu);
        mean[r] = mu;
        var[r] = D > 0 ? q / (double)D : 0.0;
    }
}

/* y = (x - mean) * rstd * w[ch] + b[ch]; w, b may be NULL */
static void rows_normalise(const double *x, int64_t R, int64_t D, const double *mean,
                           const double *rstd, const double *w, const double *b,
                           const norm_map *m, double *y) {
    if (layer_map(m)) { /* the same values without a division per element */
        for (int64_t r = 0; r < R; ++r)
            for (int64_t j = 0; j < D; ++j) {
                const double v = (x[r * D + j] - mean[r]) * rstd[r];
                y[r * D + j] = v * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
            }
        return;
    }
    for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < D; ++j) {
            const int64_t ch = norm_channel(m, r, j);
            const double v = (x[r * D + j] - mean[r]) * rstd[r];
            y[r * D + j] = v * (w ? w[ch] : 1.0) + (b ? b[ch] : 0.0);
        }
}

typedef struct norm_grads {
    double *dx, *dw, *db;   /* any may be NULL: not wanted */
    int batch_norm;         /* rows are channels: PyTorch's batch norm formula */
    int stats_are_inputs;   /* batch norm in eval mode: mean/rstd are constants */
} norm_grads;

/* dw/db of one row's channel block [j0, j1): PyTorch's group norm sums
 * (sum dy*x - mean * sum dy) * rstd; a one-element block (layer norm) is
 * dy * (x - mean) * rstd */
static void affine_grads(const double *dy, const double *x, int64_t j0, int64_t j1, double mean,
                         double rstd, int64_t ch, const norm_grads *g) {
    double sdx = 0.0, sdy = 0.0;
    for (int64_t j = j0; j < j1; ++j) {
        sdx += dy[j] * x[j];
        sdy += dy[j];
    }
    if (g->dw)
        g->dw[ch] += j1 - j0 == 1 ? dy[j0] * (x[j0] - mean) * rstd : (sdx - sdy * mean) * rstd;
    if (g->db)
        g->db[ch] += sdy;
}

/* layer / group norm, PyTorch's CPU formula: with g = dy * w[ch],
 * ds = sum g*x, db = sum g, b = (db*mean - ds) * rstd^3 / D,
 * c = -b*mean - db*rstd / D:  dx = rstd*g + b*x + c */
static void rows_backward_affine(const double *dy, const double *x, int64_t R, int64_t D,
                                 const double *mean, const double *rstd, const double *w,
                                 const norm_map *m, const norm_grads *g) {
    const int layer = layer_map(m);
    for (int64_t r = 0; r < R; ++r) {
        const double *dyr = dy + r * D, *xr = x + r * D;
        double ds = 0.0, db = 0.0;
        for (int64_t j = 0; j < D; ++j) {
            const double gj = dyr[j] * (w ? w[layer ? j : norm_channel(m, r, j)] : 1.0);
            ds += gj * xr[j];
            db += gj;
        }
        if (layer) /* affine_grads of one-element blocks, inlined */
            for (int64_t j = 0; j < D; ++j) {
                if (g->dw)
                    g->dw[j] += dyr[j] * (xr[j] - mean[r]) * rstd[r];
                if (g->db)
                    g->db[j] += dyr[j];
            }
        else
            for (int64_t j0 = 0; j0 < D && (g->dw || g->db); j0 += m->inner)
                affine_grads(dyr, xr, j0, j0 + m->inner < D ? j0 + m->inner : D, mean[r],
                             rstd[r], norm_channel(m, r, j0), g);
        if (!g->dx || D == 0)
            continue;
        const double s = 1.0 / (double)D, rs = rstd[r];
        const double b = (db * mean[r] - ds) * rs * rs * rs * s, c = -b * mean[r] - db * rs * s;
        for (int64_t j = 0; j < D; ++j) {
            const double gj = dyr[j] * (w ? w[layer ? j : norm_channel(m, r, j)] : 1.0);
            g->dx[r * D + j] = rs * gj + b * xr[j] + c;
        }
    }
}

/* batch norm (row r = channel r), PyTorch's CPU formula: sum = sum dy,
 * dotp = sum (x - mean) * dy; training: dx = (dy - sum/D - (x - mean) *
 * dotp*rstd^2/D) * rstd * w, eval: dx = dy * rstd * w; dw = dotp*rstd, db = sum */
static void rows_backward_bn(const double *dy, const double *x, int64_t R, int64_t D,
                             const double *mean, const double *rstd, const double *w,
                             const norm_grads *g) {
    for (int64_t r = 0; r < R; ++r) {
        const double *dyr = dy + r * D, *xr = x + r * D, wr = w ? w[r] : 1.0, rs = rstd[r];
        double sum = 0.0, dotp = 0.0;
        for (int64_t j = 0; j < D; ++j) {
            sum += dyr[j];
            dotp += (xr[j] - mean[r]) * dyr[j];
        }
        if (g->dw)
            g->dw[r] = dotp * rs;
        if (g->db)
            g->db[r] = sum;
        if (!g->dx)
            continue;
        const double k = D ? dotp * rs * rs / (double)D : 0.0, gm = D ? sum / (double)D : 0.0;
        for (int64_t j = 0; j < D; ++j)
            g->dx[r * D + j] = g->stats_are_inputs
                                   ? dyr[j] * rs * wr
                                   : (dyr[j] - gm - (xr[j] - mean[r]) * k) * rs * wr;
    }
}

static void rstd_from_var(double *v, int64_t n, double eps) {
    for (int64_t i = 0; i < n; ++i)
        v[i] = 1.0 / sqrt(v[i] + eps);
}

static fl_status check_float(const flk_args *a, const fl_tensor *t, const char *name) {
    return t ? flk_check_dtype(a, t, name, FLK_FLOAT_TYPES) : FL_SUCCESS;
}

/* ---- layer norm --------------------------------------------------------------- */

static fl_status layer_norm_dims(const flk_args *a, const fl_tensor *x, uint32_t nnorm,
                                 int64_t *R, int64_t *D) {
    if ((int32_t)nnorm > x->ndim)
        return flk_fail(a, "normalized_shape has %u dims, input only %d", nnorm, (int)x->ndim);
    *R = 1;
    *D = 1;
    for (int32_t d = 0; d < x->ndim; ++d)
        *(d < x->ndim - (int32_t)nnorm ? R : D) *= x->sizes[d];
    return FL_SUCCESS;
}

/* y, mean, rstd of R rows of D from x (and the affine w, b by m) */
static fl_status norm_forward(const flk_args *a, const fl_tensor *x, const fl_tensor *w,
                              const fl_tensor *b, int64_t R, int64_t D, const norm_map *m,
                              double eps, const fl_tensor *y, const fl_tensor *mo,
                              const fl_tensor *ro) {
    void *buf[6] = {0};
    fl_status st = ref_pack(a, x, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(a, w, FL_FLOAT64, &buf[1]);
    if (st == FL_SUCCESS) st = ref_pack(a, b, FL_FLOAT64, &buf[2]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, R * D, (double **)&buf[3]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, R, (double **)&buf[4]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(a, R, (double **)&buf[5]);
    if (st == FL_SUCCESS) {
        double *mean = buf[4], *rstd = buf[5];
        row_moments(buf[0], R, D, mean, rstd);
        /* PyTorch's layer and group norm take the statistics from Welford's update over
         * vector lanes (RowwiseMoments): a row holding an infinity gets a NaN mean
         * (inf - inf), where sum / D is +-inf.  Batch norm's sum / D keeps it. */
        for (int64_t r = 0; r < R; ++r)
            if (isinf(mean[r]))
                mean[r] = NAN;
        rstd_from_var(rstd, R, eps);
        rows_normalise(buf[0], R, D, mean, rstd, buf[1], buf[2], m, buf[3]);
        ref_unpack(y, FL_FLOAT64, buf[3]);
        ref_unpack(mo, FL_FLOAT64, mean);
        ref_unpack(ro, FL_FLOAT64, rstd);
    }
    ref_free_all(buf, 6);
    return st;
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd) */
FLK_KERNEL_FN(k_native_layer_norm) {
    flk_args a;
    const fl_tensor *x, *w, *b, *y, *mo, *ro;
    const int64_t *ns;
    uint32_t nn;
    double eps;
    FLK_TRY(flk_args_init(&a, "native_layer_norm", args, nargs, 8, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_int_list(&a, 1, "normalized_shape", &ns, &nn));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "bias", &b));
    FLK_TRY(flk_get_double(&a, 4, "eps", &eps));
    FLK_TRY(flk_get_tensor(&a, 5, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 6, "mean", &mo));
    FLK_TRY(flk_get_tensor(&a, 7, "rstd", &ro));
    FLK_TRY(check_float(&a, x, "input"));
    int64_t R = 1, D = 1;
    FLK_TRY(layer_norm_dims(&a, x, nn, &R, &D));
    const norm_map m = {1, 0, 1};
    return norm_forward(&a, x, w, b, R, D, &m, eps, y, mo, ro);
}
FLK_REGISTER("native_layer_norm", FLK_FLOAT_TYPES, k_native_layer_norm);

/* Shared tail of the backwards: allocate wanted grads, run, unpack, free. */
typedef struct norm_bw_job {
    const double *dy, *x, *mean, *rstd, *w;
    int64_t R, D, channels;
    norm_map map;
    int stats_are_inputs;
    const fl_tensor *gx, *gw, *gb;
    int transpose_c;        /* batch norm: rows are channels of an [N, C, HW] input */
    int64_t n, hw;
} norm_bw_job;

static void transpose_nch(const double *src, double *dst, int64_t n, int64_t c, int64_t hw,
                          int to_rows) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < c; ++k)
            for (int64_t j = 0; j < hw; ++j) {
                const int64_t nch = (i * c + k) * hw + j, rows = k * n * hw + i * hw + j;
                if (to_rows)
                    dst[rows] = src[nch];
                else
                    dst[nch] = src[rows];
            }
}

static fl_status run_norm_backward(const flk_args *a, const norm_bw_job *j) {
    void *buf[4] = {0};
    fl_status st = FL_SUCCESS;
    if (j->gx) st = ref_alloc_f64(a, j->R * j->D, (double **)&buf[0]);
    if (st == FL_SUCCESS && j->gw) st = ref_alloc_f64(a, j->channels, (double **)&buf[1]);
    if (st == FL_SUCCESS && j->gb) st = ref_alloc_f64(a, j->channels, (double **)&buf[2]);
    if (st == FL_SUCCESS && j->gx && j->transpose_c)
        st = ref_alloc_f64(a, j->R * j->D, (double **)&buf[3]);
    if (st == FL_SUCCESS) {
        for (int k = 1; k <= 2; ++k)
            if (buf[k])
                memset(buf[k], 0, (size_t)j->channels * sizeof(double));
        const norm_grads g = {buf[0], buf[1], buf[2], j->transpose_c, j->stats_are_inputs};
        if (g.batch_norm)
            rows_backward_bn(j->dy, j->x, j->R, j->D, j->mean, j->rstd, j->w, &g);
        else
            rows_backward_affine(j->dy, j->x, j->R, j->D, j->mean, j->rstd, j->w, &j->map, &g);
        if (buf[3]) {
            transpose_nch(buf[0], buf[3], j->n, j->R, j->hw, 0);
            ref_unpack(j->gx, FL_FLOAT64, buf[3]);
        } else {
            ref_unpack(j->gx, FL_FLOAT64, buf[0]);
        }
        ref_unpack(j->gw, FL_FLOAT64, buf[1]);
        ref_unpack(j->gb, FL_FLOAT64, buf[2]);
    }
    ref_free_all(buf, 4);
    return st;
}

/* run_norm_backward on packed dy, x, mean, rstd, w (row-major: layer / group norm) */
static fl_status packed_backward(const flk_args *a, const fl_tensor *dy, const fl_tensor *x,
                                 const fl_tensor *mt, const fl_tensor *rt, const fl_tensor *w,
                                 norm_bw_job *j) {
    void *buf[5] = {0};
    fl_status st = ref_pack(a, dy, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(a, x, FL_FLOAT64, &buf[1]);
    if (st == FL_SUCCESS) st = ref_pack(a, mt, FL_FLOAT64, &buf[2]);
    if (st == FL_SUCCESS) st = ref_pack(a, rt, FL_FLOAT64, &buf[3]);
    if (st == FL_SUCCESS) st = ref_pack(a, w, FL_FLOAT64, &buf[4]);
    if (st == FL_SUCCESS) {
        j->dy = buf[0], j->x = buf[1], j->mean = buf[2], j->rstd = buf[3], j->w = buf[4];
        st = run_norm_backward(a, j);
    }
    ref_free_all(buf, 5);
    return st;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?,
 *                            bias?, output_mask) -> (grad_input?, grad_weight?, grad_bias?) */
FLK_KERNEL_FN(k_native_layer_norm_backward) {
    flk_args a;
    const fl_tensor *dy, *x, *mt, *rt, *w, *b, *gx, *gw, *gb;
    const int64_t *ns;
    uint32_t nn;
    FLK_TRY(flk_args_init(&a, "native_layer_norm_backward", args, nargs, 11, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_out", &dy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(flk_get_int_list(&a, 2, "normalized_shape", &ns, &nn));
    FLK_TRY(flk_get_tensor(&a, 3, "mean", &mt));
    FLK_TRY(flk_get_tensor(&a, 4, "rstd", &rt));
    FLK_TRY(flk_get_opt_tensor(&a, 5, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 6, "bias", &b));
    FLK_TRY(flk_get_opt_tensor(&a, 8, "grad_input", &gx));
    FLK_TRY(flk_get_opt_tensor(&a, 9, "grad_weight", &gw));
    FLK_TRY(flk_get_opt_tensor(&a, 10, "grad_bias", &gb));
    FLK_TRY(check_float(&a, x, "input"));
    norm_bw_job j = {.map = {1, 0, 1}, .gx = gx, .gw = gw, .gb = gb};
    FLK_TRY(layer_norm_dims(&a, x, nn, &j.R, &j.D));
    j.channels = j.D;
    return packed_backward(&a, dy, x, mt, rt, w, &j);
}
FLK_REGISTER("native_layer_norm_backward", FLK_FLOAT_TYPES, k_native_layer_norm_backward);

/* ---- group norm ------------------------------------------------------------------ */

typedef struct gn_shape {
    int64_t n, c, hw, groups;
} gn_shape;

static fl_status gn_read_shape(const flk_args *a, uint32_t first, const fl_tensor *x,
                               gn_shape *s) {
    FLK_TRY(flk_get_int(a, first, "N", &s->n));
    FLK_TRY(flk_get_int(a, first + 1, "C", &s->c));
    FLK_TRY(flk_get_int(a, first + 2, "HxW", &s->hw));
    FLK_TRY(flk_get_int(a, first + 3, "group", &s->groups));
    if (s->groups <= 0 || s->c % s->groups != 0)
        return flk_fail(a, "C=%lld is not divisible by group=%lld", (long long)s->c,
                        (long long)s->groups);
    if (s->n * s->c * s->hw != flk_numel(x))
        return flk_fail(a, "N*C*HxW=%lld does not match the input's %lld elements",
                        (long long)(s->n * s->c * s->hw), (long long)flk_numel(x));
    return FL_SUCCESS;
}

static norm_map gn_map(const gn_shape *s) {
    return (norm_map){s->groups, s->c / s->groups, s->hw > 0 ? s->hw : 1};
}

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd) */
FLK_KERNEL_FN(k_native_group_norm) {
    flk_args a;
    const fl_tensor *x, *w, *b, *y, *mo, *ro;
    gn_shape s;
    double eps;
    FLK_TRY(flk_args_init(&a, "native_group_norm", args, nargs, 11, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_opt_tensor(&a, 1, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "bias", &b));
    FLK_TRY(gn_read_shape(&a, 3, x, &s));
    FLK_TRY(flk_get_double(&a, 7, "eps", &eps));
    FLK_TRY(flk_get_tensor(&a, 8, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 9, "mean", &mo));
    FLK_TRY(flk_get_tensor(&a, 10, "rstd", &ro));
    FLK_TRY(check_float(&a, x, "input"));
    const int64_t R = s.n * s.groups, D = s.groups ? (s.c / s.groups) * s.hw : 0;
    const norm_map m = gn_map(&s);
    return norm_forward(&a, x, w, b, R, D, &m, eps, y, mo, ro);
}
FLK_REGISTER("native_group_norm", FLK_FLOAT_TYPES, k_native_group_norm);

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
 *                            output_mask) -> (grad_input?, grad_weight?, grad_bias?) */
FLK_KERNEL_FN(k_native_group_norm_backward) {
    flk_args a;
    const fl_tensor *dy, *x, *mt, *rt, *w, *gx, *gw, *gb;
    gn_shape s;
    FLK_TRY(flk_args_init(&a, "native_group_norm_backward", args, nargs, 13, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_out", &dy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(flk_get_tensor(&a, 2, "mean", &mt));
    FLK_TRY(flk_get_tensor(&a, 3, "rstd", &rt));
    FLK_TRY(flk_get_opt_tensor(&a, 4, "weight", &w));
    FLK_TRY(gn_read_shape(&a, 5, x, &s));
    FLK_TRY(flk_get_opt_tensor(&a, 10, "grad_input", &gx));
    FLK_TRY(flk_get_opt_tensor(&a, 11, "grad_weight", &gw));
    FLK_TRY(flk_get_opt_tensor(&a, 12, "grad_bias", &gb));
    FLK_TRY(check_float(&a, x, "input"));
    norm_bw_job j = {.R = s.n * s.groups, .D = (s.c / s.groups) * s.hw, .channels = s.c,
                     .map = gn_map(&s), .gx = gx, .gw = gw, .gb = gb};
    return packed_backward(&a, dy, x, mt, rt, w, &j);
}
FLK_REGISTER("native_group_norm_backward", FLK_FLOAT_TYPES, k_native_group_norm_backward);

/* ---- batch norm -------------------------------------------------------------------- */

/* input [N, C, *]: n, c, hw */
static fl_status bn_shape(const flk_args *a, const fl_tensor *x, int64_t *n, int64_t *c,
                          int64_t *hw) {
    *n = *c = *hw = 0;        /* set on every path: gcc 14+ cannot tell that flk_fail never succeeds */
    if (x->ndim < 2)
        return flk_fail(a, "input must have at least 2 dims (N, C, ...), got %d", (int)x->ndim);
    *n = x->sizes[0];
    *c = x->sizes[1];
    *hw = 1;
    for (int32_t d = 2; d < x->ndim; ++d)
        *hw *= x->sizes[d];
    return FL_SUCCESS;
}

/* packed input as C rows of N*HW */
static fl_status bn_pack_rows(const flk_args *a, const fl_tensor *t, int64_t n, int64_t c,
                              int64_t hw, double **rows) {
    void *packed;
    FLK_TRY(ref_pack(a, t, FL_FLOAT64, &packed));
    fl_status st = ref_alloc_f64(a, n * c * hw, rows);
    if (st == FL_SUCCESS)
        transpose_nch(packed, *rows, n, c, hw, 1);
    flk_free(packed);
    return st;
}

/* running = (1 - momentum) * running + momentum * batch (var: unbiased) */
static fl_status bn_update_running(const flk_args *a, const fl_tensor *rm, const fl_tensor *rv,
                                   const double *mean, const double *var, int64_t c,
                                   int64_t count, double momentum) {
    void *buf[2] = {0};
    fl_status st = ref_pack(a, rm, FL_FLOAT64, &buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(a, rv, FL_FLOAT64, &buf[1]);
    if (st == FL_SUCCESS) {
        const double unbias = count > 1 ? (double)count / (double)(count - 1) : INFINITY;
        for (int64_t k = 0; k < c; ++k) {
            if (buf[0])
                ((double *)buf[0])[k] = (1 - momentum) * ((double *)buf[0])[k] + momentum * mean[k];
            if (buf[1])
                ((double *)buf[1])[k] =
                    (1 - momentum) * ((double *)buf[1])[k] + momentum * var[k] * unbias;
        }
        ref_unpack(rm, FL_FLOAT64, buf[0]);
        ref_unpack(rv, FL_FLOAT64, buf[1]);
    }
    ref_free_all(buf, 2);
    return st;
}

/* mean and rstd per channel: from the batch (training) or the running stats */
static fl_status bn_stats(const flk_args *a, const double *rows, int64_t c, int64_t d,
                          int training, const fl_tensor *rm, const fl_tensor *rv, double eps,
                          double momentum, double *mean, double *rstd) {
    if (training) {
        row_moments(rows, c, d, mean, rstd);
        FLK_TRY(bn_update_running(a, rm, rv, mean, rstd, c, d, momentum));
        rstd_from_var(rstd, c, eps);
        return FL_SUCCESS;
    }
    if (!rm || !rv)
        return flk_fail(a, "running_mean and running_var are required in eval mode");
    flk_convert(mean, FL_FLOAT64, 8, flk_data(rm), rm->dtype,
                rm->strides[0] * (int64_t)flk_dtype_size(rm->dtype), c);
    flk_convert(rstd, FL_FLOAT64, 8, flk_data(rv), rv->dtype,
                rv->strides[0] * (int64_t)flk_dtype_size(rv->dtype), c);
    rstd_from_var(rstd, c, eps);
    return FL_SUCCESS;
}

/* native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training,
 *                   momentum, eps) -> (out, save_mean, save_invstd) */
FLK_KERNEL_FN(k_native_batch_norm) {
    flk_args a;
    const fl_tensor *x, *w, *b, *rm, *rv, *y, *sm, *si;
    int training;
    double momentum, eps;
    int64_t n, c, hw;
    FLK_TRY(flk_args_init(&a, "native_batch_norm", args, nargs, 11, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "input", &x));
    FLK_TRY(flk_get_opt_tensor(&a, 1, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "bias", &b));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "running_mean", &rm));
    FLK_TRY(flk_get_opt_tensor(&a, 4, "running_var", &rv));
    FLK_TRY(flk_get_bool(&a, 5, "training", &training));
    FLK_TRY(flk_get_double(&a, 6, "momentum", &momentum));
    FLK_TRY(flk_get_double(&a, 7, "eps", &eps));
    FLK_TRY(flk_get_tensor(&a, 8, "out", &y));
    FLK_TRY(flk_get_tensor(&a, 9, "save_mean", &sm));
    FLK_TRY(flk_get_tensor(&a, 10, "save_invstd", &si));
    FLK_TRY(check_float(&a, x, "input"));
    FLK_TRY(bn_shape(&a, x, &n, &c, &hw));
    void *buf[6] = {0};
    fl_status st = bn_pack_rows(&a, x, n, c, hw, (double **)&buf[0]);
    if (st == FL_SUCCESS) st = ref_pack(&a, w, FL_FLOAT64, &buf[1]);
    if (st == FL_SUCCESS) st = ref_pack(&a, b, FL_FLOAT64, &buf[2]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, c, (double **)&buf[3]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, c, (double **)&buf[4]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, 2 * n * c * hw, (double **)&buf[5]);
    if (st == FL_SUCCESS)
        st = bn_stats(&a, buf[0], c, n * hw, training, rm, rv, eps, momentum, buf[3], buf[4]);
    if (st == FL_SUCCESS) {
        double *rows_out = buf[5], *nch = rows_out + n * c * hw;
        const norm_map m = {c > 0 ? c : 1, 1, n * hw > 0 ? n * hw : 1};
        rows_normalise(buf[0], c, n * hw, buf[3], buf[4], buf[1], buf[2], &m, rows_out);
        transpose_nch(rows_out, nch, n, c, hw, 0);
        ref_unpack(y, FL_FLOAT64, nch);
        if (training && flk_numel(sm) == c && flk_numel(si) == c) {
            ref_unpack(sm, FL_FLOAT64, buf[3]);
            ref_unpack(si, FL_FLOAT64, buf[4]);
        }
    }
    ref_free_all(buf, 6);
    return st;
}
FLK_REGISTER("native_batch_norm", FLK_FLOAT_TYPES, k_native_batch_norm);

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
 *     save_mean?, save_invstd?, train, eps, output_mask) -> (grad_input?, grad_weight?,
 *     grad_bias?) */
FLK_KERNEL_FN(k_native_batch_norm_backward) {
    flk_args a;
    const fl_tensor *dy, *x, *w, *rm, *rv, *sm, *si, *gx, *gw, *gb;
    int train;
    double eps;
    int64_t n, c, hw;
    FLK_TRY(flk_args_init(&a, "native_batch_norm_backward", args, nargs, 13, ctx));
    FLK_TRY(flk_get_tensor(&a, 0, "grad_out", &dy));
    FLK_TRY(flk_get_tensor(&a, 1, "input", &x));
    FLK_TRY(flk_get_opt_tensor(&a, 2, "weight", &w));
    FLK_TRY(flk_get_opt_tensor(&a, 3, "running_mean", &rm));
    FLK_TRY(flk_get_opt_tensor(&a, 4, "running_var", &rv));
    FLK_TRY(flk_get_opt_tensor(&a, 5, "save_mean", &sm));
    FLK_TRY(flk_get_opt_tensor(&a, 6, "save_invstd", &si));
    FLK_TRY(flk_get_bool(&a, 7, "train", &train));
    FLK_TRY(flk_get_double(&a, 8, "eps", &eps));
    FLK_TRY(flk_get_opt_tensor(&a, 10, "grad_input", &gx));
    FLK_TRY(flk_get_opt_tensor(&a, 11, "grad_weight", &gw));
    FLK_TRY(flk_get_opt_tensor(&a, 12, "grad_bias", &gb));
    FLK_TRY(check_float(&a, x, "input"));
    FLK_TRY(bn_shape(&a, x, &n, &c, &hw));
    if (train && (!sm || !si))
        return flk_fail(&a, "save_mean and save_invstd are required when train is true");
    norm_bw_job j = {.R = c, .D = n * hw, .channels = c, .map = {c > 0 ? c : 1, 1, 1},
                     .stats_are_inputs = !train, .gx = gx, .gw = gw, .gb = gb,
                     .transpose_c = 1, .n = n, .hw = hw};
    j.map.inner = j.D > 0 ? j.D : 1;
    void *buf[5] = {0};
    fl_status st = bn_pack_rows(&a, dy, n, c, hw, (double **)&buf[0]);
    if (st == FL_SUCCESS) st = bn_pack_rows(&a, x, n, c, hw, (double **)&buf[1]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, c, (double **)&buf[2]);
    if (st == FL_SUCCESS) st = ref_alloc_f64(&a, c, (double **)&buf[3]);
    if (st == FL_SUCCESS) st = ref_pack(&a, w, FL_FLOAT64, &buf[4]);
    if (st == FL_SUCCESS && train) {
        void *mp = NULL, *ip = NULL;
        st = ref_pack(&a, sm, FL_FLOAT64, &mp);
        if (st == FL_SUCCESS) st = ref_pack(&a, si, FL_FLOAT64, &ip);
        if (st == FL_SUCCESS) {
            memcpy(buf[2], mp, (size_t)c * sizeof(double));
            memcpy(buf[3], ip, (size_t)c * sizeof(double));
        }
        flk_free(mp);
        flk_free(ip);
    } else if (st == FL_SUCCESS) {
        st = bn_stats(&a, buf[1], c, n * hw, 0, rm, rv, eps, 0.0, buf[2], buf[3]);
    }
    if (st == FL_SUCCESS) {
        j.dy = buf[0], j.x = buf[1], j.mean = buf[2], j.rstd = buf[3], j.w = buf[4];
        st = run_norm_backward(&a, &j);
    }
    ref_free_all(buf, 5);
    return st;
}
FLK_REGISTER("native_batch_norm_backward", FLK_FLOAT_TYPES, k_native_batch_norm_backward);
