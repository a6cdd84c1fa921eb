// fused.cu: elementwise chains of a transformer layer in one pass each (tensor.RowKernels;
// bias + activation is bias_act in elementwise.cu, the norms are norm.cu's). Activations
// are [rows, c] (rows = B·T), computed in C (float for F32, BF16 and F16, double for F64).
// Bias gradients are column sums of the outputs (reduce.cu).

// bias_dropout_add: y = residual + dropout(x + bias[j]) where element e keeps its value
// scaled by 1/(1−p) unless the uniform draw of the full tensor's element base + off0(e)
// (Idx d over y's shape, st[0] = the full tensor's strides) is below p: the mask of
// tensor.RNG's DistDropout, the same on every backend and layout. bias and residual may
// be null; p = 0 draws nothing.
template <typename C>
__device__ void bias_dropout_add_impl(void* y, const void* x, const void* bias, const void* residual, int dt, i64 n,
                                      i64 c, const Idx& d, i64 base, u32 k0, u32 k1, double p) {
  const C scale = (C)(1.0 / (1.0 - p));
  GRID_STRIDE(e, n) {
    C v = IO<C>::ld(x, dt, e);
    if (bias) v += IO<C>::ld(bias, dt, e % c);
    if (p > 0) {
      i64 o0, o1, o2;
      idx_offsets(d, e, &o0, &o1, &o2);
      v = uniform_at((u64)(base + o0), k0, k1) < p ? (C)0 : v * scale;
    }
    if (residual) v += IO<C>::ld(residual, dt, e);
    IO<C>::st(y, dt, e, v);
  }
}

extern "C" __global__ void bias_dropout_add_f(void* y, const void* x, const void* bias, const void* residual, int dt,
                                              i64 n, i64 c, Idx d, i64 base, u32 k0, u32 k1, double p) {
  bias_dropout_add_impl<float>(y, x, bias, residual, dt, n, c, d, base, k0, k1, p);
}
extern "C" __global__ void bias_dropout_add_d(void* y, const void* x, const void* bias, const void* residual, int dt,
                                              i64 n, i64 c, Idx d, i64 base, u32 k0, u32 k1, double p) {
  bias_dropout_add_impl<double>(y, x, bias, residual, dt, n, c, d, base, k0, k1, p);
}

// dropout_bwd: dx = dy·mask/(1−p), the mask drawn again as bias_dropout_add drew it
// (p = 0: dx = dy).
template <typename C>
__device__ void dropout_bwd_impl(void* dx, const void* dy, int dt, i64 n, const Idx& d, i64 base, u32 k0, u32 k1,
                                 double p) {
  const C scale = (C)(1.0 / (1.0 - p));
  GRID_STRIDE(e, n) {
    C g = IO<C>::ld(dy, dt, e);
    if (p > 0) {
      i64 o0, o1, o2;
      idx_offsets(d, e, &o0, &o1, &o2);
      g = uniform_at((u64)(base + o0), k0, k1) < p ? (C)0 : g * scale;
    }
    IO<C>::st(dx, dt, e, g);
  }
}

extern "C" __global__ void dropout_bwd_f(void* dx, const void* dy, int dt, i64 n, Idx d, i64 base, u32 k0, u32 k1,
                                         double p) {
  dropout_bwd_impl<float>(dx, dy, dt, n, d, base, k0, k1, p);
}
extern "C" __global__ void dropout_bwd_d(void* dx, const void* dy, int dt, i64 n, Idx d, i64 base, u32 k0, u32 k1,
                                         double p) {
  dropout_bwd_impl<double>(dx, dy, dt, n, d, base, k0, k1, p);
}

// swiglu: with hg = gate + gbias[j] and hu = up + ubias[j] (biases may be null),
// y = silu(hg)·hu = hg·σ(hg)·hu.
template <typename C>
__device__ void swiglu_impl(void* y, const void* gate, const void* up, const void* gbias, const void* ubias, int dt,
                            i64 n, i64 c) {
  GRID_STRIDE(e, n) {
    C hg = IO<C>::ld(gate, dt, e), hu = IO<C>::ld(up, dt, e);
    if (gbias) hg += IO<C>::ld(gbias, dt, e % c);
    if (ubias) hu += IO<C>::ld(ubias, dt, e % c);
    IO<C>::st(y, dt, e, hg / ((C)1 + exp(-hg)) * hu);
  }
}

extern "C" __global__ void swiglu_f(void* y, const void* gate, const void* up, const void* gbias, const void* ubias,
                                    int dt, i64 n, i64 c) {
  swiglu_impl<float>(y, gate, up, gbias, ubias, dt, n, c);
}
extern "C" __global__ void swiglu_d(void* y, const void* gate, const void* up, const void* gbias, const void* ubias,
                                    int dt, i64 n, i64 c) {
  swiglu_impl<double>(y, gate, up, gbias, ubias, dt, n, c);
}

// swiglu_bwd: dup = dy·hg·σ(hg) and dgate = dy·hu·σ(hg)·(1 + hg·(1 − σ(hg))).
template <typename C>
__device__ void swiglu_bwd_impl(void* dgate, void* dup, const void* dy, const void* gate, const void* up,
                                const void* gbias, const void* ubias, int dt, i64 n, i64 c) {
  GRID_STRIDE(e, n) {
    C hg = IO<C>::ld(gate, dt, e), hu = IO<C>::ld(up, dt, e), d = IO<C>::ld(dy, dt, e);
    if (gbias) hg += IO<C>::ld(gbias, dt, e % c);
    if (ubias) hu += IO<C>::ld(ubias, dt, e % c);
    C sig = (C)1 / ((C)1 + exp(-hg));
    IO<C>::st(dup, dt, e, d * (hg * sig));
    IO<C>::st(dgate, dt, e, d * hu * (sig * ((C)1 + hg * ((C)1 - sig))));
  }
}

extern "C" __global__ void swiglu_bwd_f(void* dgate, void* dup, const void* dy, const void* gate, const void* up,
                                        const void* gbias, const void* ubias, int dt, i64 n, i64 c) {
  swiglu_bwd_impl<float>(dgate, dup, dy, gate, up, gbias, ubias, dt, n, c);
}
extern "C" __global__ void swiglu_bwd_d(void* dgate, void* dup, const void* dy, const void* gate, const void* up,
                                        const void* gbias, const void* ubias, int dt, i64 n, i64 c) {
  swiglu_bwd_impl<double>(dgate, dup, dy, gate, up, gbias, ubias, dt, n, c);
}

// rope rotates x [B, NH, T, HS] as Hugging Face Llama does (rotate_half): with halves
// x1 = x[..., :HS/2], x2 = x[..., HS/2:] and angle f = pos[t]·θ^(−2i/HS),
// y1 = x1·cos f − x2·sin f, y2 = x2·cos f + x1·sin f. sign = −1 rotates back (the
// backward). pos (I32 or I64) has T entries. The angle, its cosine and sine are computed
// in double and rounded to C, each product to C before the sum (the CPU kernel's order).
template <typename C>
__device__ void rope_impl(void* y, const void* x, int dt, const void* pos, int pdt, i64 bnh, i64 T, i64 hs,
                          double theta, double sign) {
  i64 half = hs / 2;
  GRID_STRIDE(e, bnh * T * half) {
    i64 i = e % half, row = e / half, t = row % T;
    double f = (double)ld_index(pos, pdt, t) * pow(theta, -2.0 * (double)i / (double)hs);
    C cs = (C)cos(f), sn = (C)(sign * sin(f));
    i64 a = row * hs + i, b = a + half;
    C x1 = IO<C>::ld(x, dt, a), x2 = IO<C>::ld(x, dt, b);
    C p1 = x1 * cs, p2 = -(x2 * sn), p3 = x2 * cs, p4 = x1 * sn;
    IO<C>::st(y, dt, a, p1 + p2);
    IO<C>::st(y, dt, b, p3 + p4);
  }
}

extern "C" __global__ void rope_f(void* y, const void* x, int dt, const void* pos, int pdt, i64 bnh, i64 T, i64 hs,
                                  double theta, double sign) {
  rope_impl<float>(y, x, dt, pos, pdt, bnh, T, hs, theta, sign);
}
extern "C" __global__ void rope_d(void* y, const void* x, int dt, const void* pos, int pdt, i64 bnh, i64 T, i64 hs,
                                  double theta, double sign) {
  rope_impl<double>(y, x, dt, pos, pdt, bnh, T, hs, theta, sign);
}
