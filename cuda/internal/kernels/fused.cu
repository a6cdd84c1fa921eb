// fused.cu: elementwise chains of a transformer layer in one pass each. Activations are
// [rows, c] (rows = B·T) computed in float.

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float k = 0.7978845608028654f;
  float t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

// bias_gelu: y = gelu(x + bias[j]) (tanh approximation); bias may be null.
extern "C" __global__ void bias_gelu(void* y, const void* x, const void* bias, int dt, i64 rows, i64 c) {
  GRID_STRIDE(e, rows * c) {
    float v = ld_f(x, dt, e);
    if (bias) v += ld_f(bias, dt, e % c);
    st_f(y, dt, e, gelu_tanh(v));
  }
}

// bias_gelu_bwd: dx = dy·gelu'(x + bias[j]). The bias gradient is the column sum of dx
// (reduce.cu's colsum kernels).
extern "C" __global__ void bias_gelu_bwd(void* dx, const void* dy, const void* x, const void* bias, int dt, i64 rows,
                                         i64 c) {
  GRID_STRIDE(e, rows * c) {
    float v = ld_f(x, dt, e);
    if (bias) v += ld_f(bias, dt, e % c);
    st_f(dx, dt, e, ld_f(dy, dt, e) * gelu_tanh_grad(v));
  }
}

// bias_dropout_add: y = residual + dropout(x + bias[j]) where element e keeps its value
// scaled by 1/(1−p) unless the uniform draw of the full tensor's element base + off0(e)
// (Idx d over y's shape, st[0] = the full tensor's strides) is below p: the mask of
// tensor.RNG's DistDropout, the same on every backend and layout. bias and residual may
// be null; p = 0 draws nothing.
extern "C" __global__ void bias_dropout_add(void* y, const void* x, const void* bias, const void* residual, int dt,
                                            i64 n, i64 c, Idx d, i64 base, u32 k0, u32 k1, double p) {
  GRID_STRIDE(e, n) {
    float v = ld_f(x, dt, e);
    if (bias) v += ld_f(bias, dt, e % c);
    if (p > 0) {
      i64 o0, o1, o2;
      idx_offsets(d, e, &o0, &o1, &o2);
      v = uniform_at((u64)(base + o0), k0, k1) < p ? 0.0f : v * (float)(1.0 / (1.0 - p));
    }
    if (residual) v += ld_f(residual, dt, e);
    st_f(y, dt, e, v);
  }
}

// dropout_bwd: dx = dy·mask/(1−p), the mask drawn again as bias_dropout_add drew it.
extern "C" __global__ void dropout_bwd(void* dx, const void* dy, int dt, i64 n, Idx d, i64 base, u32 k0, u32 k1,
                                       double p) {
  GRID_STRIDE(e, n) {
    i64 o0, o1, o2;
    idx_offsets(d, e, &o0, &o1, &o2);
    float g = ld_f(dy, dt, e);
    st_f(dx, dt, e, uniform_at((u64)(base + o0), k0, k1) < p ? 0.0f : g * (float)(1.0 / (1.0 - p)));
  }
}

// rope rotates x [B, NH, T, HS] as Hugging Face Llama does (rotate_half): with halves
// x1 = x[..., :HS/2], x2 = x[..., HS/2:] and angle f = pos[t]·θ^(−2i/HS),
// y1 = x1·cos f − x2·sin f, y2 = x2·cos f + x1·sin f. sign = −1 rotates back (the
// backward). pos (I32 or I64) has T entries. The angle is computed in double.
extern "C" __global__ void rope(void* y, const void* x, int dt, const void* pos, int pdt, i64 bnh, i64 T, i64 hs,
                                double theta, double sign) {
  i64 half = hs / 2;
  GRID_STRIDE(e, bnh * T * half) {
    i64 i = e % half, row = e / half, t = row % T;
    double f = (double)ld_index(pos, pdt, t) * pow(theta, -2.0 * (double)i / (double)hs);
    float cs = (float)cos(f), sn = (float)(sign * sin(f));
    i64 a = row * hs + i, b = a + half;
    float x1 = ld_f(x, dt, a), x2 = ld_f(x, dt, b);
    st_f(y, dt, a, x1 * cs - x2 * sn);
    st_f(y, dt, b, x2 * cs + x1 * sn);
  }
}
