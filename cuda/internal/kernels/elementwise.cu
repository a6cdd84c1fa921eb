// elementwise.cu: fill, arange, cast, strided copies, random draws, unary and binary
// functions with broadcasting, where, and gradient accumulation. Operand dtypes are
// arguments (tensor.DType numbers); the compute type is float for F32/BF16/F16 results
// and double otherwise, as in the CPU backend. Every kernel is grid-stride.

extern "C" __global__ void fill64(u64* p, u64 v, i64 n) {
  GRID_STRIDE(i, n) p[i] = v;
}

// arange sets dst[i] = start + i·step, computed in double.
extern "C" __global__ void arange(void* dst, int dt, i64 n, double start, double step) {
  GRID_STRIDE(i, n) st_d(dst, dt, i, start + (double)i * step);
}

// cast converts with one rounding: through double when either side is F64 or the source
// is an integer, else through float; integers convert exactly between I32 and I64.
extern "C" __global__ void cast(void* dst, int ddt, const void* src, int sdt, i64 n) {
  bool ints = (ddt == DT_I32 || ddt == DT_I64) && (sdt == DT_I32 || sdt == DT_I64);
  bool wide = sdt == DT_F64 || sdt == DT_I32 || sdt == DT_I64 || ddt == DT_F64;
  GRID_STRIDE(i, n) {
    if (ints) {
      i64 v = ld_index(src, sdt, i);
      if (ddt == DT_I32) ((int*)dst)[i] = (int)v; else ((i64*)dst)[i] = v;
    } else if (wide) {
      st_d(dst, ddt, i, ld_d(src, sdt, i));
    } else {
      st_f(dst, ddt, i, ld_f(src, sdt, i));
    }
  }
}

// copy_strided_N copies n elements of N bytes: element i goes from src + off1(i) to
// dst + off0(i) (Permute, Copy2D, Concat's pieces).
#define COPY_STRIDED(N, T)                                                                  \
  extern "C" __global__ void copy_strided_##N(T* dst, const T* src, Idx d, i64 n) {          \
    GRID_STRIDE(i, n) {                                                                     \
      i64 o0, o1, o2;                                                                       \
      idx_offsets(d, i, &o0, &o1, &o2);                                                     \
      dst[o0] = src[o1];                                                                    \
    }                                                                                       \
  }
COPY_STRIDED(2, u16)
COPY_STRIDED(4, u32)
COPY_STRIDED(8, u64)

// random_fill sets dst (contiguous, n elements) to the draws of the full tensor's elements
// base + off0(i): the region's element index in the unsharded tensor.
extern "C" __global__ void random_fill(void* dst, int dt, i64 n, Idx d, i64 base, u32 k0, u32 k1, int dist,
                                  double a, double b) {
  GRID_STRIDE(i, n) {
    i64 o0, o1, o2;
    idx_offsets(d, i, &o0, &o1, &o2);
    st_d(dst, dt, i, sample_at((u64)(base + o0), k0, k1, dist, a, b));
  }
}

// Unary ops (tensor.UnaryOp).
#define OP_NEG 1
#define OP_EXP 2
#define OP_LOG 3
#define OP_SQRT 4
#define OP_TANH 5
#define OP_GELU_TANH 6
#define OP_GELU_ERF 7
#define OP_SILU 8
#define OP_RELU 9
#define OP_ADD_SCALAR 10
#define OP_MUL_SCALAR 11
#define OP_POW_SCALAR 12
#define OP_SIGMOID 13

template <typename C> __device__ __forceinline__ C unary_fn(int op, C x, double p) {
  const C k = (C)0.7978845608028654;  // √(2/π)
  switch (op) {
    case OP_NEG: return -x;
    case OP_EXP: return exp(x);
    case OP_LOG: return log(x);
    case OP_SQRT: return sqrt(x);
    case OP_TANH: return tanh(x);
    case OP_GELU_TANH: return (C)0.5 * x * ((C)1 + tanh(k * (x + (C)0.044715 * x * x * x)));
    case OP_GELU_ERF: return (C)0.5 * x * ((C)1 + erf(x * (C)0.7071067811865476));
    case OP_SILU: return x / ((C)1 + exp(-x));
    case OP_RELU: return x != x ? x : (x > (C)0 ? x : (C)0);
    case OP_ADD_SCALAR: return (C)((double)x + p);
    case OP_MUL_SCALAR: return (C)((double)x * p);
    case OP_POW_SCALAR: return pow(x, (C)p);
    default: return (C)1 / ((C)1 + exp(-x));  // OP_SIGMOID
  }
}

// unary_grad returns op'(x) given y = op(x).
template <typename C> __device__ __forceinline__ C unary_grad(int op, C x, C y, double p) {
  const C k = (C)0.7978845608028654;
  switch (op) {
    case OP_NEG: return (C)-1;
    case OP_EXP: return y;
    case OP_LOG: return (C)1 / x;
    case OP_SQRT: return (C)0.5 / y;
    case OP_TANH: return (C)1 - y * y;
    case OP_GELU_TANH: {
      C t = tanh(k * (x + (C)0.044715 * x * x * x));
      return (C)0.5 * ((C)1 + t) + (C)0.5 * x * ((C)1 - t * t) * k * ((C)1 + (C)3 * (C)0.044715 * x * x);
    }
    case OP_GELU_ERF:
      return (C)0.5 * ((C)1 + erf(x * (C)0.7071067811865476)) + x * exp((C)-0.5 * x * x) * (C)0.3989422804014327;
    case OP_SILU: {
      C s = (C)1 / ((C)1 + exp(-x));
      return s * ((C)1 + x * ((C)1 - s));
    }
    case OP_RELU: return x > (C)0 ? (C)1 : (C)0;
    case OP_ADD_SCALAR: return (C)1;
    case OP_MUL_SCALAR: return (C)p;
    case OP_POW_SCALAR: return (C)p * pow(x, (C)(p - 1));
    default: return y * ((C)1 - y);  // OP_SIGMOID
  }
}

template <typename C>
__device__ void unary_impl(void* dst, int ddt, const void* x, int xdt, i64 n, int op, double p) {
  GRID_STRIDE(i, n) IO<C>::st(dst, ddt, i, unary_fn<C>(op, IO<C>::ld(x, xdt, i), p));
}

extern "C" __global__ void unary_f(void* dst, int ddt, const void* x, int xdt, i64 n, int op, double p) {
  unary_impl<float>(dst, ddt, x, xdt, n, op, p);
}
extern "C" __global__ void unary_d(void* dst, int ddt, const void* x, int xdt, i64 n, int op, double p) {
  unary_impl<double>(dst, ddt, x, xdt, n, op, p);
}

// unary_bwd sets dx = dy·op'(x); x or y may be null when op does not use it.
template <typename C>
__device__ void unary_bwd_impl(void* dx, int dt, const void* x, const void* y, const void* dy, i64 n, int op,
                               double p) {
  GRID_STRIDE(i, n) {
    C xv = x ? IO<C>::ld(x, dt, i) : (C)0;
    C yv = y ? IO<C>::ld(y, dt, i) : (C)0;
    IO<C>::st(dx, dt, i, IO<C>::ld(dy, dt, i) * unary_grad<C>(op, xv, yv, p));
  }
}

extern "C" __global__ void unary_bwd_f(void* dx, int dt, const void* x, const void* y, const void* dy, i64 n,
                                       int op, double p) {
  unary_bwd_impl<float>(dx, dt, x, y, dy, n, op, p);
}
extern "C" __global__ void unary_bwd_d(void* dx, int dt, const void* x, const void* y, const void* dy, i64 n,
                                       int op, double p) {
  unary_bwd_impl<double>(dx, dt, x, y, dy, n, op, p);
}

// bias_act sets y = op(x + bias[j]) for x, y [n/c, c] (tensor.RowKernels.BiasActivation);
// bias may be null. It is here, not in fused.cu, to share unary_fn.
template <typename C>
__device__ void bias_act_impl(void* y, const void* x, const void* bias, int dt, i64 n, i64 c, int op) {
  GRID_STRIDE(e, n) {
    C v = IO<C>::ld(x, dt, e);
    if (bias) v += IO<C>::ld(bias, dt, e % c);
    IO<C>::st(y, dt, e, unary_fn<C>(op, v, 0));
  }
}

extern "C" __global__ void bias_act_f(void* y, const void* x, const void* bias, int dt, i64 n, i64 c, int op) {
  bias_act_impl<float>(y, x, bias, dt, n, c, op);
}
extern "C" __global__ void bias_act_d(void* y, const void* x, const void* bias, int dt, i64 n, i64 c, int op) {
  bias_act_impl<double>(y, x, bias, dt, n, c, op);
}

// bias_act_bwd sets dx = dy·op'(x + bias[j]); the bias gradient is dx's column sum.
template <typename C>
__device__ void bias_act_bwd_impl(void* dx, const void* dy, const void* x, const void* bias, int dt, i64 n, i64 c,
                                  int op) {
  GRID_STRIDE(e, n) {
    C v = IO<C>::ld(x, dt, e);
    if (bias) v += IO<C>::ld(bias, dt, e % c);
    IO<C>::st(dx, dt, e, IO<C>::ld(dy, dt, e) * unary_grad<C>(op, v, unary_fn<C>(op, v, 0), 0));
  }
}

extern "C" __global__ void bias_act_bwd_f(void* dx, const void* dy, const void* x, const void* bias, int dt, i64 n,
                                          i64 c, int op) {
  bias_act_bwd_impl<float>(dx, dy, x, bias, dt, n, c, op);
}
extern "C" __global__ void bias_act_bwd_d(void* dx, const void* dy, const void* x, const void* bias, int dt, i64 n,
                                          i64 c, int op) {
  bias_act_bwd_impl<double>(dx, dy, x, bias, dt, n, c, op);
}

// Binary ops (tensor.BinaryOp).
#define OP_ADD 1
#define OP_SUB 2
#define OP_MUL 3
#define OP_DIV 4

template <typename C> __device__ __forceinline__ C binary_fn(int op, C a, C b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    default: return a / b;
  }
}

// binary sets dst[i] = op(a[off0(i)], b[off1(i)]) for contiguous dst; a and b broadcast.
template <typename C>
__device__ void binary_impl(void* dst, int dt, const void* a, const void* b, i64 n, int op, const Idx& d) {
  GRID_STRIDE(i, n) {
    i64 oa, ob, oc;
    idx_offsets(d, i, &oa, &ob, &oc);
    IO<C>::st(dst, dt, i, binary_fn<C>(op, IO<C>::ld(a, dt, oa), IO<C>::ld(b, dt, ob)));
  }
}

extern "C" __global__ void binary_f(void* dst, int dt, const void* a, const void* b, i64 n, int op, Idx d) {
  binary_impl<float>(dst, dt, a, b, n, op, d);
}
extern "C" __global__ void binary_d(void* dst, int dt, const void* a, const void* b, i64 n, int op, Idx d) {
  binary_impl<double>(dst, dt, a, b, n, op, d);
}

// where sets dst[i] = cond[off0(i)] ≠ 0 ? a[off1(i)] : b[off2(i)].
extern "C" __global__ void where(void* dst, int dt, const void* cond, int cdt, const void* a, const void* b, i64 n,
                                 Idx d) {
  GRID_STRIDE(i, n) {
    i64 oc, oa, ob;
    idx_offsets(d, i, &oc, &oa, &ob);
    if (ld_d(cond, cdt, oc) != 0.0) {
      st_d(dst, dt, i, ld_d(a, dt, oa));
    } else {
      st_d(dst, dt, i, ld_d(b, dt, ob));
    }
  }
}

// accumulate_grad adds grad (any float dtype) into main (F32 or F64) and zeroes grad.
extern "C" __global__ void accumulate_grad(void* main, int mdt, void* grad, int gdt, i64 n) {
  GRID_STRIDE(i, n) {
    if (mdt == DT_F64) {
      ((double*)main)[i] += ld_d(grad, gdt, i);
    } else {
      ((float*)main)[i] += ld_f(grad, gdt, i);
    }
    st_f(grad, gdt, i, 0.0f);
  }
}
