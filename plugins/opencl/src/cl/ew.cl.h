/*
 * ew.cl.h -- OpenCL C of the elementwise family (CLK_EW): unary, binary,
 * ternary, comparison and where kernels over any broadcast, strided layout,
 * and the fused Adam and SGD steps.  See cl_sources.c for how this file becomes a
 * string (no preprocessor directives in here; program.c's prelude defines T,
 * ACC, LD, ST, KF and the op codes).
 *
 * Every kernel is grid-stride over the n items of a clk_shape (clk.h):
 * operand k's element of item i is at its offset + the sum over dimensions of
 * index * stride.  A scalar operand has no buffer; its value comes as an
 * argument and a flag says to use it.  The formulas follow PyTorch's CPU
 * kernels (the reference vendor's, fl_sdk kernel_lib): an explicit fma where
 * ATen's vectorised loops fuse, and contraction off everywhere else.
 */
FLCL_PROGRAM(ew,

typedef struct clk_shape {
    long nd;
    long n;
    long size[CLK_MAX_DIMS];
    long stride[CLK_MAX_OPERANDS][CLK_MAX_DIMS];
} clk_shape;

/* element offsets of the four operands of item i */
void item_offsets(const clk_shape *s, long i, long *o) {
    o[0] = 0; o[1] = 0; o[2] = 0; o[3] = 0;
    for (int d = (int)s->nd - 1; d >= 0; d--) {
        long size = s->size[d];
        long x = i % size;
        i /= size;
        o[0] += x * s->stride[0][d];
        o[1] += x * s->stride[1][d];
        o[2] += x * s->stride[2][d];
        o[3] += x * s->stride[3][d];
    }
}

ACC clamp_lo_hi(ACC x, ACC lo, ACC hi) {
    return x < lo ? (lo > hi ? hi : lo) : (x > hi ? hi : x);
}

ACC sigmoid_of(ACC x) { return (ACC)1 / ((ACC)1 + exp(-x)); }

/* tanh, exactly +-1 in the tails (PoCL's is 1 - 2^-24 at infinity, which
 * gelu's 1 + tanh turns into 2^-24 |x| instead of 0) */
ACC tanh_of(ACC x) { return fabs(x) > KF(20.0) ? copysign((ACC)1, x) : tanh(x); }

ACC gelu_tanh_inner(ACC x) {
    return KF(0.7978845608028654) * (x + KF(0.044715) * x * x * x);
}

ACC unary_op(int op, ACC x, ACC p0, ACC p1) {
    switch (op) {
    case U_COPY: return x;
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_RELU: return x < (ACC)0 ? (ACC)0 : x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return (ACC)1 / sqrt(x);
    case U_TANH: return tanh_of(x);
    case U_SIGMOID: return sigmoid_of(x);
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_RECIPROCAL: return (ACC)1 / x;
    case U_ERF: return erf(x);
    case U_LOG1P: return log1p(x);
    case U_EXPM1: return expm1(x);
    case U_GELU: return KF(0.5) * x * erfc(-x * KF(0.7071067811865476));   /* = 1 + erf(x / sqrt 2), exact 0 in the far negative tail */
    case U_GELU_TANH: return KF(0.5) * x * ((ACC)1 + tanh_of(gelu_tanh_inner(x)));
    case U_SILU: return x / ((ACC)1 + exp(-x));
    case U_POW: return pow(x, p0);
    case U_ADD: return fma(p1, p0, x);            /* self + alpha * other */
    case U_MUL: return x * p0;
    case U_DIV: return x / p0;
    case U_RSUB: return fma(-p1, x, p0);          /* other - alpha * self */
    case U_FILL: return p0;
    case U_CLAMP: return clamp_lo_hi(x, p0, p1);
    case U_THRESHOLD: return x <= p0 ? p1 : x;
    case U_LEAKY_RELU: return x > (ACC)0 ? x : x * p0;
    case U_HARDTANH: return clamp_lo_hi(x, p0, p1);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_TRUNC: return trunc(x);
    case U_ROUND: return rint(x);
    case U_SQUARE: return x * x;
    case U_CUBE: return x * x * x;
    case U_INV_SQUARE: return (ACC)1 / (x * x);
    case U_ONE: return (ACC)1;
    default: return x;
    }
}

ACC gelu_grad(ACC x) {
    ACC cdf = KF(0.5) * ((ACC)1 + erf(x * KF(0.7071067811865476)));
    return cdf + x * KF(0.3989422804014327) * exp(KF(-0.5) * x * x);
}

ACC gelu_tanh_grad(ACC x) {
    ACC t = tanh_of(gelu_tanh_inner(x));
    ACC dinner = KF(0.7978845608028654) * ((ACC)1 + KF(3.0) * KF(0.044715) * x * x);
    return KF(0.5) * ((ACC)1 + t) + KF(0.5) * x * ((ACC)1 - t * t) * dinner;
}

ACC lerp_of(ACC a, ACC b, ACC w) {
    int small = fabs(w) < KF(0.5);
    ACC coeff = small ? w : w - (ACC)1;
    return fma(coeff, b - a, small ? a : b);
}

ACC binary_op(int op, ACC a, ACC b, ACC p0, ACC p1) {
    switch (op) {
    case B_ADD: return fma(p0, b, a);
    case B_SUB: return fma(-p0, b, a);
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_MAXIMUM: return a != a ? a : (b != b ? b : (a < b ? b : a));
    case B_MINIMUM: return a != a ? a : (b != b ? b : (b < a ? b : a));
    case B_POW: return pow(a, b);
    case B_ATAN2: return atan2(a, b);
    case B_LERP: return lerp_of(a, b, p0);
    case B_THRESHOLD_BACKWARD: return b <= p0 ? (ACC)0 : a;
    case B_TANH_BACKWARD: return a * fma(-b, b, (ACC)1);
    case B_SIGMOID_BACKWARD: return a * ((ACC)1 - b) * b;
    case B_GELU_BACKWARD: return a * gelu_grad(b);
    case B_GELU_TANH_BACKWARD: return a * gelu_tanh_grad(b);
    case B_SILU_BACKWARD: return a * sigmoid_of(b) * ((ACC)1 + b * ((ACC)1 - sigmoid_of(b)));
    case B_RSUB: return fma(-p0, a, b);
    case B_HARDTANH_BACKWARD: return (b <= p0 || b >= p1) ? (ACC)0 : a;
    case B_LEAKY_RELU_BACKWARD: return b > (ACC)0 ? a : a * p0;
    default: return a;
    }
}

ACC ternary_op(int op, ACC a, ACC b, ACC c, ACC p0) {
    switch (op) {
    case T_ADDCMUL: return fma(p0 * b, c, a);
    case T_ADDCDIV: return a + p0 * b / c;
    case T_LERP: return lerp_of(a, b, c);
    default: return a;
    }
}

int compare_op(int op, ACC a, ACC b) {
    switch (op) {
    case C_EQ: return a == b;
    case C_NE: return a != b;
    case C_LT: return a < b;
    case C_LE: return a <= b;
    case C_GT: return a > b;
    default: return a >= b;
    }
}

__kernel void ew_unary(__global T *o, long o0, __global const T *a, long a0, clk_shape s, int op, ACC p0, ACC p1) {
    long off[4];
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        item_offsets(&s, i, off);
        ST(o, o0 + off[0], unary_op(op, LD(a, a0 + off[1]), p0, p1));
    }
}

/* a or b may be a scalar (sa / sb, with a_scalar / b_scalar set) */
__kernel void ew_binary(__global T *o, long o0, __global const T *a, long a0, __global const T *b, long b0,
                        clk_shape s, int op, ACC p0, ACC p1, int a_scalar, ACC sa, int b_scalar, ACC sb) {
    long off[4];
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        item_offsets(&s, i, off);
        ACC x = a_scalar ? sa : LD(a, a0 + off[1]);
        ACC y = b_scalar ? sb : LD(b, b0 + off[2]);
        ST(o, o0 + off[0], binary_op(op, x, y, p0, p1));
    }
}

__kernel void ew_ternary(__global T *o, long o0, __global const T *a, long a0, __global const T *b, long b0,
                         __global const T *c, long c0, clk_shape s, int op, ACC p0, int c_scalar, ACC sc) {
    long off[4];
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        item_offsets(&s, i, off);
        ACC z = c_scalar ? sc : LD(c, c0 + off[3]);
        ST(o, o0 + off[0], ternary_op(op, LD(a, a0 + off[1]), LD(b, b0 + off[2]), z, p0));
    }
}

__kernel void ew_compare(__global uchar *o, long o0, __global const T *a, long a0, __global const T *b, long b0,
                         clk_shape s, int op, int b_scalar, ACC sb) {
    long off[4];
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        item_offsets(&s, i, off);
        ACC y = b_scalar ? sb : LD(b, b0 + off[2]);
        o[o0 + off[0]] = (uchar)compare_op(op, LD(a, a0 + off[1]), y);
    }
}

/* where(cond, a, b) and masked_fill (a = self, b the scalar): cond is bool */
__kernel void ew_where(__global T *o, long o0, __global const uchar *c, long c0, __global const T *a, long a0,
                       __global const T *b, long b0, clk_shape s, int a_scalar, ACC sa, int b_scalar, ACC sb) {
    long off[4];
    for (long i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        item_offsets(&s, i, off);
        ACC x = a_scalar ? sa : LD(a, a0 + off[2]);
        ACC y = b_scalar ? sb : LD(b, b0 + off[3]);
        ST(o, o0 + off[0], c[c0 + off[1]] ? x : y);
    }
}

/* One tensor of torch.optim's fused Adam/AdamW (ATen's FusedAdamKernel.cpp):
 * contiguous param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq with
 * amsgrad); step, grad_scale and found_inf are one-element float32 tensors.
 * h: lr, beta1, beta2, 1 - beta1, 1 - beta2, ln beta1, ln beta2, weight_decay, eps
 * (each computed in double on the host, then rounded to ACC).  flags: 1 amsgrad, 2 maximize,
 * 4 decoupled (AdamW), 8 grad_scale given, 16 found_inf given. */
__kernel void adam_step(__global T *p, long p0, __global T *g, long g0, __global T *m, long m0,
                        __global T *v, long v0, __global T *vmax, long vmax0, __global const float *step, long step0,
                        __global const float *scale, long scale0, __global const float *found, long found0,
                        long n, ACC lr, ACC beta1, ACC beta2, ACC omb1, ACC omb2, ACC ln_beta1, ACC ln_beta2,
                        ACC wd, ACC eps, int flags) {
    if ((flags & 16) && found[found0] == 1.0f)
        return;   /* GradScaler found inf/NaN: the whole step is skipped */
    ACC t = (ACC)step[step0];
    ACC step_size = lr / -expm1(t * ln_beta1);   /* 1 - beta1^t without cancellation */
    ACC bias2_sqrt = sqrt(-expm1(t * ln_beta2));
    for (long i = get_global_id(0); i < n; i += get_global_size(0)) {
        ACC param = LD(p, p0 + i), grad = LD(g, g0 + i);
        if (flags & 8) {
            grad = grad / (ACC)scale[scale0];
            ST(g, g0 + i, grad);
        }
        if (flags & 2)
            grad = -grad;
        if (wd != (ACC)0) {
            if (flags & 4)
                param = param * ((ACC)1 - lr * wd);
            else
                grad += param * wd;
        }
        ACC mm = LD(m, m0 + i);
        mm = fabs(omb1) < KF(0.5) ? mm + omb1 * (grad - mm) : grad - (grad - mm) * beta1;
        ACC vv = LD(v, v0 + i) * beta2 + omb2 * grad * grad;
        ACC denom;
        if (flags & 1) {
            ACC top = LD(vmax, vmax0 + i);
            top = top > vv ? top : vv;
            ST(vmax, vmax0 + i, top);
            denom = sqrt(top) / bias2_sqrt + eps;
        } else {
            denom = sqrt(vv) / bias2_sqrt + eps;
        }
        ST(m, m0 + i, mm);
        ST(v, v0 + i, vv);
        ST(p, p0 + i, param - step_size * mm / denom);
    }
}

/* One tensor of torch.optim's fused SGD (ATen's FusedSGDKernel.cpp): contiguous
 * param and grad (and momentum buffer).  flags: 1 momentum buffer, 2 nesterov,
 * 4 maximize, 8 first step (the buffer starts as the gradient), 16 grad_scale
 * given, 32 found_inf given. */
__kernel void sgd_step(__global T *p, long p0, __global T *g, long g0, __global T *buf, long buf0,
                       __global const float *scale, long scale0, __global const float *found, long found0,
                       long n, ACC lr, ACC wd, ACC mom, ACC one_minus_damp, int flags) {
    if ((flags & 32) && found[found0] == 1.0f)
        return;
    for (long i = get_global_id(0); i < n; i += get_global_size(0)) {
        ACC param = LD(p, p0 + i), grad = LD(g, g0 + i);
        if (flags & 16) {
            grad = grad / (ACC)scale[scale0];
            ST(g, g0 + i, grad);
        }
        if (flags & 4)
            grad = -grad;
        if (wd != (ACC)0)
            grad += param * wd;
        if (flags & 1) {
            ACC b = (flags & 8) ? grad : mom * LD(buf, buf0 + i) + one_minus_damp * grad;
            ST(buf, buf0 + i, b);
            grad = (flags & 2) ? grad + mom * b : b;
        }
        ST(p, p0 + i, param - lr * grad);
    }
}

)
