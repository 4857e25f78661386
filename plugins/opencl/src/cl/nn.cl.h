/*
 * nn.cl.h -- OpenCL C of the neural-network family (CLK_NN): softmax and
 * log_softmax with their backwards, layer norm and its backward, nll_loss,
 * index_select / gather, the embedding's backward, im2col / col2im for the
 * convolutions and max_pool2d with its backward (see cl_sources.c for how this
 * file becomes a string).
 *
 * Row kernels (softmax, layer norm) give each row one work-group of
 * CLK_GROUP items that combine partial sums in local memory.  Kernels that
 * read indices check them and report a bad one through the stream's checks
 * buffer (clk.h "device-side checks") instead of reading out of bounds.
 */
FLCL_PROGRAM(nn,

/* ---- group reductions ------------------------------------------------------------ */

ACC group_sum(__local ACC *part, ACC v) {
    int lid = get_local_id(0);
    part[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = CLK_GROUP / 2; step > 0; step /= 2) {
        if (lid < step)
            part[lid] = part[lid] + part[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    ACC total = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

ACC group_max(__local ACC *part, ACC v) {
    int lid = get_local_id(0);
    part[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = CLK_GROUP / 2; step > 0; step /= 2) {
        if (lid < step) {
            ACC a = part[lid], b = part[lid + step];
            part[lid] = (a != a || b != b) ? a + b : (b > a ? b : a);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    ACC top = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return top;
}

/* ---- softmax over one dimension ---------------------------------------------------- */

/* The rows of a tensor along one dimension: the other dimensions (row index
 * -> offset per operand) and the stride along the dimension per operand.
 * Operand 0 the output, 1 the input (or grad_output), 2 the forward output. */
typedef struct clk_rows {
    long nd, rows, k;
    long size[CLK_MAX_DIMS];
    long stride[3][CLK_MAX_DIMS];
    long kstride[3];
} clk_rows;

void row_offsets(const clk_rows *r, long row, long *o) {
    o[0] = 0; o[1] = 0; o[2] = 0;
    for (int d = (int)r->nd - 1; d >= 0; d--) {
        long x = row % r->size[d];
        row /= r->size[d];
        o[0] += x * r->stride[0][d];
        o[1] += x * r->stride[1][d];
        o[2] += x * r->stride[2][d];
    }
}

__kernel void softmax_forward(__global T *y, long y0, __global const T *x, long x0, clk_rows r, int log_form) {
    __local ACC part[CLK_GROUP];
    long off[3];
    row_offsets(&r, get_group_id(0), off);
    int lid = get_local_id(0);
    __global const T *xr = x + x0 + off[1];
    long ks = r.kstride[1];
    ACC top = -INFINITY;
    for (long j = lid; j < r.k; j += CLK_GROUP) {
        ACC v = LD(xr, j * ks);
        top = (top != top || v != v) ? top + v : (v > top ? v : top);
    }
    top = group_max(part, top);
    ACC sum = (ACC)0;
    for (long j = lid; j < r.k; j += CLK_GROUP)
        sum += exp(LD(xr, j * ks) - top);
    sum = group_sum(part, sum);
    ACC log_sum = log(sum);
    for (long j = lid; j < r.k; j += CLK_GROUP) {
        ACC v = LD(xr, j * ks) - top;
        ST(y, y0 + off[0] + j * r.kstride[0], log_form ? v - log_sum : exp(v) / sum);
    }
}

/* grad_input = out * (grad - sum(grad * out)), or for log_softmax
 * grad - exp(out) * sum(grad) */
__kernel void softmax_backward(__global T *gi, long gi0, __global const T *g, long g0, __global const T *out,
                               long out0, clk_rows r, int log_form) {
    __local ACC part[CLK_GROUP];
    long off[3];
    row_offsets(&r, get_group_id(0), off);
    int lid = get_local_id(0);
    __global const T *gr = g + g0 + off[1];
    __global const T *outr = out + out0 + off[2];
    ACC sum = (ACC)0;
    for (long j = lid; j < r.k; j += CLK_GROUP) {
        ACC gv = LD(gr, j * r.kstride[1]);
        sum += log_form ? gv : gv * LD(outr, j * r.kstride[2]);
    }
    sum = group_sum(part, sum);
    for (long j = lid; j < r.k; j += CLK_GROUP) {
        ACC gv = LD(gr, j * r.kstride[1]), ov = LD(outr, j * r.kstride[2]);
        ST(gi, gi0 + off[0] + j * r.kstride[0], log_form ? gv - exp(ov) * sum : ov * (gv - sum));
    }
}

/* ---- layer norm over the last n elements of each contiguous row ---------------------------- */

__kernel void layer_norm(__global T *y, long y0, __global const T *x, long x0, __global const T *w, long w0,
                         __global const T *b, long b0, __global ACC *mean, long mean0, __global ACC *rstd,
                         long rstd0, long n, ACC eps) {
    __local ACC part[CLK_GROUP];
    long row = get_group_id(0);
    int lid = get_local_id(0);
    __global const T *xr = x + x0 + row * n;
    ACC sum = (ACC)0;
    for (long j = lid; j < n; j += CLK_GROUP)
        sum += LD(xr, j);
    ACC mu = group_sum(part, sum) / (ACC)n;
    ACC sq = (ACC)0;
    for (long j = lid; j < n; j += CLK_GROUP) {
        ACC d = LD(xr, j) - mu;
        sq += d * d;
    }
    ACC var = group_sum(part, sq) / (ACC)n;
    ACC rs = (ACC)1 / sqrt(var + eps);
    ACC shift = -mu * rs;
    for (long j = lid; j < n; j += CLK_GROUP) {
        ACC v = LD(xr, j) * rs + shift;
        if (w)
            v = v * LD(w, w0 + j);
        if (b)
            v = v + LD(b, b0 + j);
        ST(y, y0 + row * n + j, v);
    }
    if (lid == 0) {
        /* ACC: float32 for a float16 input, as PyTorch's.  PyTorch takes the statistics from
         * Welford's update (RowwiseMoments): a row holding an infinity has a NaN mean
         * (inf - inf) where sum / n is +-inf. */
        mean[mean0 + row] = isinf(mu) ? (ACC)NAN : mu;
        rstd[rstd0 + row] = rs;
    }
}

/* ATen's layer norm backward: ds = sum(dy w x), db = sum(dy w) per row, then
 * dx = rstd dy w + b' x + c' with b' = (db mean - ds) rstd^3 / n and
 * c' = -b' mean - db rstd / n. */
__kernel void layer_norm_backward(__global T *dx, long dx0, __global const T *dy, long dy0, __global const T *x,
                                  long x0, __global const ACC *mean, long mean0, __global const ACC *rstd,
                                  long rstd0, __global const T *w, long w0, long n) {
    __local ACC part[CLK_GROUP];
    long row = get_group_id(0);
    int lid = get_local_id(0);
    __global const T *dyr = dy + dy0 + row * n;
    __global const T *xr = x + x0 + row * n;
    ACC ds = (ACC)0, db = (ACC)0;
    for (long j = lid; j < n; j += CLK_GROUP) {
        ACC g = LD(dyr, j) * (w ? LD(w, w0 + j) : (ACC)1);
        ds += g * LD(xr, j);
        db += g;
    }
    ds = group_sum(part, ds);
    db = group_sum(part, db);
    ACC mu = mean[mean0 + row], rs = rstd[rstd0 + row];
    ACC scale = (ACC)1 / (ACC)n;
    ACC bb = (db * mu - ds) * rs * rs * rs * scale;
    ACC cc = -bb * mu - db * rs * scale;
    for (long j = lid; j < n; j += CLK_GROUP) {
        ACC g = LD(dyr, j) * (w ? LD(w, w0 + j) : (ACC)1);
        ST(dx, dx0 + row * n + j, rs * g + bb * LD(xr, j) + cc);
    }
}

/* grad_weight[j] = sum over rows of dy * (x - mean) * rstd, grad_bias[j] = sum of dy */
__kernel void layer_norm_params_backward(__global T *gw, long gw0, __global T *gb, long gb0, __global const T *dy,
                                         long dy0, __global const T *x, long x0, __global const ACC *mean,
                                         long mean0, __global const ACC *rstd, long rstd0, long rows, long n) {
    for (long j = get_global_id(0); j < n; j += get_global_size(0)) {
        ACC sw = (ACC)0, sb = (ACC)0;
        for (long m = 0; m < rows; m++) {
            ACC g = LD(dy, dy0 + m * n + j);
            sw += g * (LD(x, x0 + m * n + j) - mean[mean0 + m]) * rstd[rstd0 + m];
            sb += g;
        }
        if (gw)
            ST(gw, gw0 + j, sw);
        if (gb)
            ST(gb, gb0 + j, sb);
    }
}

/* ---- nll_loss ---------------------------------------------------------------------- */

/* One sample's loss and weight: x [n, c] (or [c], n = 1) with strides xs_n,
 * xs_c; target n int64 with stride ts; a target out of range is reported. */
ACC nll_term(__global const T *x, long x0, __global const long *target, long t0, __global const T *w, long w0,
             long i, long c, long xs_n, long xs_c, long ts, long ws, long ignore_index, __global int *checks,
             ACC *weight) {
    long t = target[t0 + i * ts];
    *weight = (ACC)0;
    if (t == ignore_index)
        return (ACC)0;
    if (t < 0 || t >= c) {
        atomic_or(checks, CHECK_TARGET);
        return (ACC)0;
    }
    *weight = w ? LD(w, w0 + t * ws) : (ACC)1;
    return -LD(x, x0 + i * xs_n + t * xs_c) * *weight;
}

/* reduction none: out[i] per sample (stride os); total_weight 0, as PyTorch's CPU kernel leaves it */
__kernel void nll_forward_each(__global T *out, long out0, __global T *total, long total0, __global const T *x,
                               long x0, __global const long *target, long t0, __global const T *w, long w0, long n,
                               long c, long xs_n, long xs_c, long ts, long os, long ws, long ignore_index,
                               __global int *checks) {
    for (long i = get_global_id(0); i < n; i += get_global_size(0)) {
        ACC weight;
        ST(out, out0 + i * os, nll_term(x, x0, target, t0, w, w0, i, c, xs_n, xs_c, ts, ws, ignore_index, checks,
                                        &weight));
    }
    if (get_global_id(0) == 0)
        ST(total, total0, (ACC)0);
}

/* reduction mean (1) or sum (2): one work-group */
__kernel void nll_forward_reduce(__global T *out, long out0, __global T *total, long total0, __global const T *x,
                                 long x0, __global const long *target, long t0, __global const T *w, long w0, long n,
                                 long c, long xs_n, long xs_c, long ts, long ws, long ignore_index, int mean,
                                 __global int *checks) {
    __local ACC part[CLK_GROUP];
    ACC loss = (ACC)0, weight = (ACC)0;
    for (long i = get_local_id(0); i < n; i += CLK_GROUP) {
        ACC wi;
        loss += nll_term(x, x0, target, t0, w, w0, i, c, xs_n, xs_c, ts, ws, ignore_index, checks, &wi);
        weight += wi;
    }
    loss = group_sum(part, loss);
    weight = group_sum(part, weight);
    if (get_local_id(0) == 0) {
        ST(out, out0, mean ? loss / weight : loss);
        ST(total, total0, weight);
    }
}

/* grad_input [n, c] (strides gs_n, gs_c): -w[t] g (/ total_weight for mean) at
 * the target, 0 elsewhere; g is grad_output (per sample, stride gos, for
 * reduction 0) */
__kernel void nll_backward(__global T *gi, long gi0, __global const T *go, long go0, __global const long *target,
                           long t0, __global const T *w, long w0, __global const T *total, long total0, long n,
                           long c, long gs_n, long gs_c, long ts, long gos, long ws, int reduction,
                           long ignore_index) {
    for (long e = get_global_id(0); e < n * c; e += get_global_size(0)) {
        long i = e / c, k = e % c;
        long t = target[t0 + i * ts];
        ACC v = (ACC)0;
        if (k == t && t != ignore_index) {
            ACC g = LD(go, go0 + (reduction == 0 ? i * gos : 0));
            g = reduction == 1 ? g / LD(total, total0) : g;
            v = -g * (w ? LD(w, w0 + t * ws) : (ACC)1);
        }
        ST(gi, gi0 + i * gs_n + k * gs_c, v);
    }
}

/* ---- index_select and gather -------------------------------------------------------------- */

/* Items over the output's dimensions (not coalesced: dimension `dim` must
 * stay whole).  Operand strides: 0 output, 1 the index (index_select: only
 * along dim), 2 the input, whose coordinate along dim is the index value. */
typedef struct clk_index {
    long nd, n, dim, limit;
    long size[CLK_MAX_DIMS];
    long stride[3][CLK_MAX_DIMS];
} clk_index;

__kernel void index_gather(__global T *o, long o0, __global const T *x, long x0, __global const void *index,
                           long index0, int index_is_int, clk_index s, __global int *checks) {
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        long rest = i, oo = 0, io = 0, xo = 0;
        for (int d = (int)s.nd - 1; d >= 0; d--) {
            long c = rest % s.size[d];
            rest /= s.size[d];
            oo += c * s.stride[0][d];
            io += c * s.stride[1][d];
            if (d != s.dim)
                xo += c * s.stride[2][d];
        }
        long at = index_is_int ? (long)((__global const int *)index)[index0 + io]
                               : ((__global const long *)index)[index0 + io];
        ACC v = (ACC)0;
        if (at < 0 || at >= s.limit)
            atomic_or(checks, CHECK_INDEX);
        else
            v = LD(x, x0 + xo + at * s.stride[2][s.dim]);
        ST(o, o0 + oo, v);
    }
}

/* grad_weight[w, j] = sum of grad[i, j] over rows i whose index is w (padding
 * row: 0); each item scans every index, so the sum is in index order. */
__kernel void embedding_backward(__global T *gw, long gw0, __global const T *g, long g0,
                                 __global const long *index, long index0, long rows, long dim, long num_weights,
                                 long padding_idx) {
    for (long e = get_global_id(0); e < num_weights * dim; e += get_global_size(0)) {
        long wrow = e / dim, j = e % dim;
        ACC sum = (ACC)0;
        if (wrow != padding_idx)
            for (long i = 0; i < rows; i++)
                if (index[index0 + i] == wrow)
                    sum += LD(g, g0 + i * dim + j);
        ST(gw, gw0 + wrow * dim + j, sum);
    }
}

/* ---- im2col / col2im (2-d convolution) ---------------------------------------------------- */

typedef struct clk_conv {
    long n, c, h, w, kh, kw, oh, ow;
    long sh, sw, ph, pw, dh, dw;
    long x_st[4];                      /* the image's strides (n, c, h, w) */
    long col_bs, col_ks, col_ps;       /* the columns: sample, (c, ky, kx), output pixel */
} clk_conv;

/* col[n][(c ky kx)][(oy ox)] = x[n][c][oy sh - ph + ky dh][ox sw - pw + kx dw] (0 outside) */
__kernel void im2col(__global T *col, long col0, __global const T *x, long x0, clk_conv v) {
    long total = v.n * v.c * v.kh * v.kw * v.oh * v.ow;
    for (long i = get_global_id(0); i < total; i += get_global_size(0)) {
        long r = i;
        long ox = r % v.ow; r /= v.ow;
        long oy = r % v.oh; r /= v.oh;
        long kx = r % v.kw; r /= v.kw;
        long ky = r % v.kh; r /= v.kh;
        long ch = r % v.c;
        long b = r / v.c;
        long iy = oy * v.sh - v.ph + ky * v.dh, ix = ox * v.sw - v.pw + kx * v.dw;
        ACC val = (ACC)0;
        if (iy >= 0 && iy < v.h && ix >= 0 && ix < v.w)
            val = LD(x, x0 + b * v.x_st[0] + ch * v.x_st[1] + iy * v.x_st[2] + ix * v.x_st[3]);
        long k = (ch * v.kh + ky) * v.kw + kx;
        ST(col, col0 + b * v.col_bs + k * v.col_ks + (oy * v.ow + ox) * v.col_ps, val);
    }
}

/* gx[n][c][iy][ix] = the sum of the columns that im2col read from it (x_st: gx's strides) */
__kernel void col2im(__global T *gx, long gx0, __global const T *col, long col0, clk_conv v) {
    long total = v.n * v.c * v.h * v.w;
    for (long i = get_global_id(0); i < total; i += get_global_size(0)) {
        long r = i;
        long ix = r % v.w; r /= v.w;
        long iy = r % v.h; r /= v.h;
        long ch = r % v.c;
        long b = r / v.c;
        ACC sum = (ACC)0;
        for (long ky = 0; ky < v.kh; ky++) {
            long ty = iy + v.ph - ky * v.dh;
            if (ty < 0 || ty % v.sh != 0 || ty / v.sh >= v.oh)
                continue;
            for (long kx = 0; kx < v.kw; kx++) {
                long tx = ix + v.pw - kx * v.dw;
                if (tx < 0 || tx % v.sw != 0 || tx / v.sw >= v.ow)
                    continue;
                long k = (ch * v.kh + ky) * v.kw + kx;
                sum += LD(col, col0 + b * v.col_bs + k * v.col_ks + ((ty / v.sh) * v.ow + tx / v.sw) * v.col_ps);
            }
        }
        ST(gx, gx0 + b * v.x_st[0] + ch * v.x_st[1] + iy * v.x_st[2] + ix * v.x_st[3], sum);
    }
}

/* ---- max_pool2d ----------------------------------------------------------------------- */

typedef struct clk_pool {
    long n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    long x_st[4], o_st[4];             /* the input's (grad_input's) and output's strides */
} clk_pool;

/* PyTorch's CPU kernel: the first valid position starts the window; a larger
 * value or any NaN takes over (so the last NaN's index wins). */
__kernel void max_pool_forward(__global T *o, long o0, __global long *idx, long idx0, __global const T *x, long x0,
                               clk_pool p) {
    long total = p.n * p.c * p.oh * p.ow;
    for (long i = get_global_id(0); i < total; i += get_global_size(0)) {
        long r = i;
        long ox = r % p.ow; r /= p.ow;
        long oy = r % p.oh; r /= p.oh;
        long ch = r % p.c;
        long b = r / p.c;
        long y0 = oy * p.sh - p.ph, x0w = ox * p.sw - p.pw;
        while (y0 < 0)
            y0 += p.dh;
        while (x0w < 0)
            x0w += p.dw;
        long y1 = min(oy * p.sh - p.ph + (p.kh - 1) * p.dh + 1, p.h);
        long x1 = min(ox * p.sw - p.pw + (p.kw - 1) * p.dw + 1, p.w);
        __global const T *plane = x + x0 + b * p.x_st[0] + ch * p.x_st[1];
        ACC best = -INFINITY;
        long at = y0 * p.w + x0w;
        for (long iy = y0; iy < y1; iy += p.dh)
            for (long ix = x0w; ix < x1; ix += p.dw) {
                ACC v = LD(plane, iy * p.x_st[2] + ix * p.x_st[3]);
                if (v > best || isnan(v)) {
                    best = v;
                    at = iy * p.w + ix;
                }
            }
        long out_at = b * p.o_st[0] + ch * p.o_st[1] + oy * p.o_st[2] + ox * p.o_st[3];
        ST(o, o0 + out_at, best);
        idx[idx0 + out_at] = at;
    }
}

/* grad_input[pixel] = the sum of grad_output over the windows whose max it was,
 * in output order (as the CPU's scatter adds them); idx has the output's strides */
__kernel void max_pool_backward(__global T *gi, long gi0, __global const T *go, long go0,
                                __global const long *idx, long idx0, clk_pool p) {
    long total = p.n * p.c * p.h * p.w;
    for (long i = get_global_id(0); i < total; i += get_global_size(0)) {
        long r = i;
        long ix = r % p.w; r /= p.w;
        long iy = r % p.h; r /= p.h;
        long ch = r % p.c;
        long b = r / p.c;
        long first_y = iy + p.ph - (p.kh - 1) * p.dh, first_x = ix + p.pw - (p.kw - 1) * p.dw;
        long oy0 = first_y <= 0 ? 0 : (first_y + p.sh - 1) / p.sh, ox0 = first_x <= 0 ? 0 : (first_x + p.sw - 1) / p.sw;
        long oy1 = min((iy + p.ph) / p.sh, p.oh - 1), ox1 = min((ix + p.pw) / p.sw, p.ow - 1);
        long me = iy * p.w + ix;
        long base = b * p.o_st[0] + ch * p.o_st[1];
        ACC sum = (ACC)0;
        for (long oy = oy0; oy <= oy1; oy++)
            for (long ox = ox0; ox <= ox1; ox++) {
                long at = base + oy * p.o_st[2] + ox * p.o_st[3];
                if (idx[idx0 + at] == me)
                    sum += LD(go, go0 + at);
            }
        ST(gi, gi0 + b * p.x_st[0] + ch * p.x_st[1] + iy * p.x_st[2] + ix * p.x_st[3], sum);
    }
}

)
