/*
 * reduce.cl.h -- OpenCL C of the reduction family (CLK_REDUCE): sum, mean,
 * prod, amax and amin over any set of dimensions (see cl_sources.c for how
 * this file becomes a string).
 *
 * The host splits the input's dimensions into kept ones (an output element
 * each) and reduced ones, each set coalesced.  reduce_groups gives every
 * output one work-group whose items stride over the reduced elements and
 * combine in local memory (large reductions); reduce_items gives every output
 * one work item that loops (many small ones).  Sums accumulate in ACC (float
 * for float16); max and min propagate NaN as PyTorch's do.
 */
FLCL_PROGRAM(reduce,

typedef struct clk_reduce {
    long nkeep, nred;                   /* dimensions of each set */
    long outputs, count;                /* output elements, reduced elements per output */
    long keep_size[CLK_MAX_DIMS], keep_in[CLK_MAX_DIMS], keep_out[CLK_MAX_DIMS];
    long red_size[CLK_MAX_DIMS], red_in[CLK_MAX_DIMS];
} clk_reduce;

void keep_offsets(const clk_reduce *r, long i, long *in, long *out) {
    long a = 0, b = 0;
    for (int d = (int)r->nkeep - 1; d >= 0; d--) {
        long x = i % r->keep_size[d];
        i /= r->keep_size[d];
        a += x * r->keep_in[d];
        b += x * r->keep_out[d];
    }
    *in = a;
    *out = b;
}

long red_offset(const clk_reduce *r, long j) {
    long a = 0;
    for (int d = (int)r->nred - 1; d >= 0; d--) {
        a += (j % r->red_size[d]) * r->red_in[d];
        j /= r->red_size[d];
    }
    return a;
}

ACC combine(int op, ACC acc, ACC v) {
    switch (op) {
    case R_SUM: return acc + v;
    case R_PROD: return acc * v;
    case R_MAX: return (acc != acc || v != v) ? acc + v : (v > acc ? v : acc);
    default: return (acc != acc || v != v) ? acc + v : (v < acc ? v : acc);
    }
}

ACC identity(int op) {
    switch (op) {
    case R_SUM: return (ACC)0;
    case R_PROD: return (ACC)1;
    case R_MAX: return -INFINITY;
    default: return INFINITY;
    }
}

__kernel void reduce_groups(__global T *o, long o0, __global const T *x, long x0, clk_reduce r, int op, ACC divisor) {
    __local ACC part[CLK_GROUP];
    long out_index = get_group_id(0);
    int lid = get_local_id(0);
    long in_base, out_at;
    keep_offsets(&r, out_index, &in_base, &out_at);
    ACC acc = identity(op);
    for (long j = lid; j < r.count; j += CLK_GROUP)
        acc = combine(op, acc, LD(x, x0 + in_base + red_offset(&r, j)));
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = CLK_GROUP / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size)
            part[lid] = combine(op, part[lid], part[lid + half_size]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        ST(o, o0 + out_at, op == R_SUM && divisor != (ACC)1 ? part[0] / divisor : part[0]);
}

__kernel void reduce_items(__global T *o, long o0, __global const T *x, long x0, clk_reduce r, int op, ACC divisor) {
    for (long i = get_global_id(0); i < r.outputs; i += get_global_size(0)) {
        long in_base, out_at;
        keep_offsets(&r, i, &in_base, &out_at);
        ACC acc = identity(op);
        for (long j = 0; j < r.count; j++)
            acc = combine(op, acc, LD(x, x0 + in_base + red_offset(&r, j)));
        ST(o, o0 + out_at, op == R_SUM && divisor != (ACC)1 ? acc / divisor : acc);
    }
}

)
