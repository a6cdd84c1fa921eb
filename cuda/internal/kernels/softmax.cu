// softmax.cu: scaled, masked and causal softmax and log-softmax over the last dim, and
// their backward: one block per row. x is [rows, n] viewed as [..., tq, n]; query r%tq
// may see keys j < r%tq + n − tq + 1 when causal. The optional mask broadcasts to x:
// row r's mask starts at offset off0(r) of Idx m (over the leading dims) and steps
// mstride along the row; a non-zero mask value hides the key.

template <typename C>
__device__ __forceinline__ bool sm_allowed(const void* mask, int mdt, i64 moff, i64 mstride, i64 j, i64 lim) {
  return j < lim && (mask == 0 || ld_d(mask, mdt, moff + j * mstride) == 0.0);
}

template <typename C>
__device__ void softmax_impl(void* y, const void* x, int dt, const void* mask, int mdt, Idx m, i64 mstride, i64 rows,
                             i64 n, i64 tq, double scale, int causal, int logsm) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    i64 moff = 0, u1, u2;
    if (mask) idx_offsets(m, r, &moff, &u1, &u2);
    i64 lim = n;
    if (causal) lim = min(n, max((i64)0, r % tq + n - tq + 1));
    const C sc = (C)scale;
    C mx = (C)NEG_INF;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x)
      if (sm_allowed<C>(mask, mdt, moff, mstride, j, lim)) mx = nan_max(mx, sc * IO<C>::ld(x, dt, r * n + j));
    mx = block_max(mx);
    if (mx == (C)NEG_INF) {  // every key masked
      for (i64 j = threadIdx.x; j < n; j += blockDim.x) IO<C>::st(y, dt, r * n + j, logsm ? (C)NEG_INF : (C)0);
      continue;
    }
    C s = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x)
      if (sm_allowed<C>(mask, mdt, moff, mstride, j, lim)) s += exp(sc * IO<C>::ld(x, dt, r * n + j) - mx);
    s = block_sum(s);
    C ls = log(s);
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
      C v;
      if (!sm_allowed<C>(mask, mdt, moff, mstride, j, lim)) {
        v = logsm ? (C)NEG_INF : (C)0;
      } else {
        C z = sc * IO<C>::ld(x, dt, r * n + j) - mx;
        v = logsm ? z - ls : exp(z) / s;
      }
      IO<C>::st(y, dt, r * n + j, v);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) softmax_f(void* y, const void* x, int dt, const void* mask, int mdt, Idx m, i64 mstride,
                                     i64 rows, i64 n, i64 tq, double scale, int causal, int logsm) {
  softmax_impl<float>(y, x, dt, mask, mdt, m, mstride, rows, n, tq, scale, causal, logsm);
}
extern "C" __global__ void __launch_bounds__(1024) softmax_d(void* y, const void* x, int dt, const void* mask, int mdt, Idx m, i64 mstride,
                                     i64 rows, i64 n, i64 tq, double scale, int causal, int logsm) {
  softmax_impl<double>(y, x, dt, mask, mdt, m, mstride, rows, n, tq, scale, causal, logsm);
}

// softmax_bwd: dx = scale·y·(dy − Σ dy·y) for softmax; for log-softmax
// dx = scale·(dy − e^y·Σ dy) over the keys that were not masked (y ≠ −∞), 0 elsewhere.
template <typename C>
__device__ void softmax_bwd_impl(void* dx, const void* y, const void* dy, int dt, i64 rows, i64 n, double scale,
                                 int logsm) {
  const C sc = (C)scale;
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    C s = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
      C yv = IO<C>::ld(y, dt, r * n + j), g = IO<C>::ld(dy, dt, r * n + j);
      if (logsm) {
        if (yv != (C)NEG_INF) s += g;
      } else {
        s += g * yv;
      }
    }
    s = block_sum(s);
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
      C yv = IO<C>::ld(y, dt, r * n + j), g = IO<C>::ld(dy, dt, r * n + j);
      C v;
      if (logsm) {
        v = yv == (C)NEG_INF ? (C)0 : sc * (g - exp(yv) * s);
      } else {
        v = sc * yv * (g - s);
      }
      IO<C>::st(dx, dt, r * n + j, v);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) softmax_bwd_f(void* dx, const void* y, const void* dy, int dt, i64 rows, i64 n,
                                         double scale, int logsm) {
  softmax_bwd_impl<float>(dx, y, dy, dt, rows, n, scale, logsm);
}
extern "C" __global__ void __launch_bounds__(1024) softmax_bwd_d(void* dx, const void* y, const void* dy, int dt, i64 rows, i64 n,
                                         double scale, int logsm) {
  softmax_bwd_impl<double>(dx, y, dy, dt, rows, n, scale, logsm);
}
