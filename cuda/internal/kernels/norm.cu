// norm.cu: LayerNorm and RMSNorm over the last dim (C) of [rows, C], forward and
// backward, optionally fused with a residual add. One block per row; the weight and bias
// gradients are column sums done in two deterministic stages (norm_wgrad_partial, then
// colsum_finish of reduce.cu's kind, here norm_wgrad_finish).
//
// Forward with a residual: s = x + res is stored in sum (x's dtype) and normalized, as an
// unfused x + res followed by the norm would (the sum rounded to the dtype first).
// Backward with a residual: dx = the norm's input gradient + dextra (the gradient reaching
// s from its other use), which is also the residual's gradient.

template <typename C>
__device__ __forceinline__ C norm_in(const void* x, const void* res, int dt, i64 at) {
  C v = IO<C>::ld(x, dt, at);
  if (res) {
    // Round the sum to the storage dtype, as a materialized x + res would be.
    v = v + IO<C>::ld(res, dt, at);
    if (dt == DT_BF16) v = (C)bf16_to_f(f_to_bf16((float)v));
    if (dt == DT_F16) v = (C)f16_to_f(f_to_f16((float)v));
    if (dt == DT_F32) v = (C)(float)v;
  }
  return v;
}

// norm_fwd: y = (s − mean)·rstd·w + b (LayerNorm) or s·rstd·w (RMSNorm, rms = 1) with
// rstd = 1/√(var + eps); w, b, mean and sum may be null; mean and rstd have dtype sdt.
template <typename C>
__device__ void norm_fwd_impl(void* y, void* mean, void* rstd, int sdt, const void* x, const void* res, void* sum,
                              const void* w, const void* b, int dt, i64 rows, i64 c, double eps, int rms) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const i64 base = r * c;
    C mu = 0;
    if (!rms) {
      for (i64 j = threadIdx.x; j < c; j += blockDim.x) mu += norm_in<C>(x, res, dt, base + j);
      mu = block_sum(mu) / (C)c;
    }
    C v2 = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      C d = norm_in<C>(x, res, dt, base + j) - mu;
      v2 += d * d;
    }
    v2 = block_sum(v2);
    C rs = (C)1 / sqrt(v2 / (C)c + (C)eps);
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      C s = norm_in<C>(x, res, dt, base + j);
      if (sum) IO<C>::st(sum, dt, base + j, s);
      C o = (s - mu) * rs;
      if (w) o *= IO<C>::ld(w, dt, j);
      if (b) o += IO<C>::ld(b, dt, j);
      IO<C>::st(y, dt, base + j, o);
    }
    if (threadIdx.x == 0) {
      if (mean) IO<C>::st(mean, sdt, r, mu);
      IO<C>::st(rstd, sdt, r, rs);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) norm_fwd_f(void* y, void* mean, void* rstd, int sdt, const void* x, const void* res,
                                      void* sum, const void* w, const void* b, int dt, i64 rows, i64 c, double eps,
                                      int rms) {
  norm_fwd_impl<float>(y, mean, rstd, sdt, x, res, sum, w, b, dt, rows, c, eps, rms);
}
extern "C" __global__ void __launch_bounds__(1024) norm_fwd_d(void* y, void* mean, void* rstd, int sdt, const void* x, const void* res,
                                      void* sum, const void* w, const void* b, int dt, i64 rows, i64 c, double eps,
                                      int rms) {
  norm_fwd_impl<double>(y, mean, rstd, sdt, x, res, sum, w, b, dt, rows, c, eps, rms);
}

// norm_bwd: with g = dy·w and x̂ = (x − mean)·rstd,
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) (+ dextra); RMSNorm (mean null) drops mean(g).
template <typename C>
__device__ void norm_bwd_impl(void* dx, const void* dy, const void* x, const void* w, const void* dextra, int dt,
                              const void* mean, const void* rstd, int sdt, i64 rows, i64 c) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const i64 base = r * c;
    C mu = mean ? IO<C>::ld(mean, sdt, r) : (C)0;
    C rs = IO<C>::ld(rstd, sdt, r);
    C sg = 0, sgx = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      C g = IO<C>::ld(dy, dt, base + j);
      if (w) g *= IO<C>::ld(w, dt, j);
      sg += g;
      sgx += g * ((IO<C>::ld(x, dt, base + j) - mu) * rs);
    }
    sg = block_sum(sg) / (C)c;
    sgx = block_sum(sgx) / (C)c;
    if (!mean) sg = 0;
    for (i64 j = threadIdx.x; j < c; j += blockDim.x) {
      C g = IO<C>::ld(dy, dt, base + j);
      if (w) g *= IO<C>::ld(w, dt, j);
      C xh = (IO<C>::ld(x, dt, base + j) - mu) * rs;
      C v = rs * (g - sg - xh * sgx);
      if (dextra) v += IO<C>::ld(dextra, dt, base + j);
      IO<C>::st(dx, dt, base + j, v);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) norm_bwd_f(void* dx, const void* dy, const void* x, const void* w, const void* dextra,
                                      int dt, const void* mean, const void* rstd, int sdt, i64 rows, i64 c) {
  norm_bwd_impl<float>(dx, dy, x, w, dextra, dt, mean, rstd, sdt, rows, c);
}
extern "C" __global__ void __launch_bounds__(1024) norm_bwd_d(void* dx, const void* dy, const void* x, const void* w, const void* dextra,
                                      int dt, const void* mean, const void* rstd, int sdt, i64 rows, i64 c) {
  norm_bwd_impl<double>(dx, dy, x, w, dextra, dt, mean, rstd, sdt, rows, c);
}

// norm_wgrad_partial: for the rows of chunk blockIdx.y, pw[chunk, j] = Σ dy·x̂ and
// pb[chunk, j] = Σ dy (pb may be null), in double.
extern "C" __global__ void norm_wgrad_partial(double* pw, double* pb, const void* dy, const void* x, int dt,
                                              const void* mean, const void* rstd, int sdt, i64 rows, i64 c,
                                              i64 chunk) {
  i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  double sw = 0, sb = 0;
  for (i64 r = r0; r < r1; r++) {
    double mu = mean ? ld_d(mean, sdt, r) : 0.0;
    double g = ld_d(dy, dt, r * c + j);
    sw += g * ((ld_d(x, dt, r * c + j) - mu) * ld_d(rstd, sdt, r));
    sb += g;
  }
  pw[(i64)blockIdx.y * c + j] = sw;
  if (pb) pb[(i64)blockIdx.y * c + j] = sb;
}

// norm_wgrad_finish: dw[j] = Σ_chunk pw[chunk, j] and db likewise (db may be null).
extern "C" __global__ void norm_wgrad_finish(void* dw, void* db, int dt, const double* pw, const double* pb,
                                             i64 chunks, i64 c) {
  GRID_STRIDE(j, c) {
    double sw = 0, sb = 0;
    for (i64 k = 0; k < chunks; k++) {
      sw += pw[k * c + j];
      if (pb) sb += pb[k * c + j];
    }
    if (dw) st_d(dw, dt, j, sw);
    if (db) st_d(db, dt, j, sb);
  }
}
