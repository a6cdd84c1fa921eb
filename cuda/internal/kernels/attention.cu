// attention.cu: fused (flash-style) attention, forward and backward, for q, k, v and out
// of [B, NH, T, HS] (self-attention: as many keys as queries) in bf16 or f32, computing
// in float. The forward keeps, per query, a running max and sum of the softmax over key
// tiles held in shared memory and writes out and the log-sum-exp L [B·NH, T] (F32); the
// scores [T, T] are never stored. The backward recomputes them tile by tile: one kernel
// gives dK and dV (a thread per key), another dQ (a thread per query), both deterministic.
// Causal attention lets query i see keys j ≤ i. One thread per row, plain FMAs: no tensor
// cores yet. HS is a template parameter (32, 64, 128) so rows live in registers.

struct BF16S {
  typedef u16 T;
  static __device__ __forceinline__ float ld(const u16* p, i64 i) { return bf16_to_f(p[i]); }
  static __device__ __forceinline__ void st(u16* p, i64 i, float v) { p[i] = f_to_bf16(v); }
};

struct F32S {
  typedef float T;
  static __device__ __forceinline__ float ld(const float* p, i64 i) { return p[i]; }
  static __device__ __forceinline__ void st(float* p, i64 i, float v) { p[i] = v; }
};

#define FA_BR 64  // queries per forward block (one per thread)
#define FA_BC 32  // keys per shared-memory tile

template <typename S, int HS>
__device__ void flash_fwd_impl(typename S::T* O, float* L, const typename S::T* Q, const typename S::T* K,
                               const typename S::T* V, i64 T, float scale, int causal) {
  __shared__ float ks[FA_BC][HS];
  __shared__ float vs[FA_BC][HS];
  __shared__ float sc[FA_BR][FA_BC + 1];
  const i64 bh = blockIdx.y, q0 = (i64)blockIdx.x * FA_BR, qi = q0 + threadIdx.x;
  const i64 off = bh * T * HS;
  const bool active = qi < T;
  float q[HS], acc[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) {
    q[d] = active ? S::ld(Q, off + qi * HS + d) * scale : 0.0f;
    acc[d] = 0.0f;
  }
  float m = NEG_INF, l = 0.0f;
  const i64 kend = causal ? min(T, q0 + FA_BR) : T;
  for (i64 k0 = 0; k0 < kend; k0 += FA_BC) {
    for (int e = threadIdx.x; e < FA_BC * HS; e += blockDim.x) {
      int j = e / HS, d = e % HS;
      bool in = k0 + j < T;
      ks[j][d] = in ? S::ld(K, off + (k0 + j) * HS + d) : 0.0f;
      vs[j][d] = in ? S::ld(V, off + (k0 + j) * HS + d) : 0.0f;
    }
    __syncthreads();
    if (active) {
      // Scores of this tile (in shared memory, padded against bank conflicts), then
      // one rescale of the running sums per tile.
      float mt = NEG_INF;
#pragma unroll 1
      for (int j = 0; j < FA_BC; j++) {
        i64 kj = k0 + j;
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; d++) dot += q[d] * ks[j][d];
        float sj = (kj < T && (!causal || kj <= qi)) ? dot : NEG_INF;
        sc[threadIdx.x][j] = sj;
        mt = fmaxf(mt, sj);
      }
      float mn = fmaxf(m, mt);
      if (mn != NEG_INF) {
        float corr = __expf(m - mn);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HS; d++) acc[d] *= corr;
#pragma unroll 1
        for (int j = 0; j < FA_BC; j++) {
          float p = __expf(sc[threadIdx.x][j] - mn);
          l += p;
#pragma unroll
          for (int d = 0; d < HS; d++) acc[d] += p * vs[j][d];
        }
        m = mn;
      }
    }
    __syncthreads();
  }
  if (active) {
    float inv = 1.0f / l;
#pragma unroll
    for (int d = 0; d < HS; d++) S::st(O, off + qi * HS + d, acc[d] * inv);
    L[bh * T + qi] = m + logf(l);
  }
}

// flash_bwd_pre: D[row] = Σ_d dO[row, d]·O[row, d] for every row of [B·NH·T, hs].
template <typename S>
__device__ void flash_bwd_pre_impl(float* D, const typename S::T* O, const typename S::T* dO, i64 rows, i64 hs) {
  GRID_STRIDE(r, rows) {
    float s = 0.0f;
    for (i64 d = 0; d < hs; d++) s += S::ld(dO, r * hs + d) * S::ld(O, r * hs + d);
    D[r] = s;
  }
}

// Tiles of the dK/dV kernel: keys per block (a thread each) and queries per tile.
#define KV_BK(HS) ((HS) <= 64 ? 64 : 32)
#define KV_BQ(HS) ((HS) <= 64 ? 16 : 8)

template <typename S, int HS>
__device__ void flash_bwd_dkdv_impl(typename S::T* dK, typename S::T* dV, const typename S::T* Q,
                                    const typename S::T* K, const typename S::T* V, const typename S::T* dO,
                                    const float* L, const float* D, i64 T, float scale, int causal) {
  const int BK = KV_BK(HS), BQ = KV_BQ(HS);
  __shared__ float kt[KV_BK(HS)][HS + 1];  // padded: each thread reads its own row
  __shared__ float vt[KV_BK(HS)][HS + 1];
  __shared__ float qt[KV_BQ(HS)][HS];
  __shared__ float got[KV_BQ(HS)][HS];
  __shared__ float lt[KV_BQ(HS)], dt[KV_BQ(HS)];
  const i64 bh = blockIdx.y, j0 = (i64)blockIdx.x * BK, kj = j0 + threadIdx.x;
  const i64 off = bh * T * HS;
  for (int e = threadIdx.x; e < BK * HS; e += blockDim.x) {
    int j = e / HS, d = e % HS;
    bool in = j0 + j < T;
    kt[j][d] = in ? S::ld(K, off + (j0 + j) * HS + d) : 0.0f;
    vt[j][d] = in ? S::ld(V, off + (j0 + j) * HS + d) : 0.0f;
  }
  float dk[HS], dv[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) dk[d] = dv[d] = 0.0f;
  const i64 qstart = causal ? (j0 / BQ) * BQ : 0;
  for (i64 i0 = qstart; i0 < T; i0 += BQ) {
    __syncthreads();
    for (int e = threadIdx.x; e < BQ * HS; e += blockDim.x) {
      int i = e / HS, d = e % HS;
      bool in = i0 + i < T;
      qt[i][d] = in ? S::ld(Q, off + (i0 + i) * HS + d) : 0.0f;
      got[i][d] = in ? S::ld(dO, off + (i0 + i) * HS + d) : 0.0f;
    }
    for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
      bool in = i0 + i < T;
      lt[i] = in ? L[bh * T + i0 + i] : 0.0f;
      dt[i] = in ? D[bh * T + i0 + i] : 0.0f;
    }
    __syncthreads();
    if (kj >= T) continue;
#pragma unroll 1
    for (int i = 0; i < BQ; i++) {
      i64 qi = i0 + i;
      if (qi >= T || (causal && kj > qi)) continue;
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < HS; d++) {
        s += qt[i][d] * kt[threadIdx.x][d];
        dp += got[i][d] * vt[threadIdx.x][d];
      }
      float p = __expf(s * scale - lt[i]);
      float ds = p * (dp - dt[i]);
#pragma unroll
      for (int d = 0; d < HS; d++) {
        dv[d] += p * got[i][d];
        dk[d] += ds * qt[i][d];
      }
    }
  }
  if (kj < T) {
#pragma unroll
    for (int d = 0; d < HS; d++) {
      S::st(dK, off + kj * HS + d, dk[d] * scale);
      S::st(dV, off + kj * HS + d, dv[d]);
    }
  }
}

template <typename S, int HS>
__device__ void flash_bwd_dq_impl(typename S::T* dQ, const typename S::T* Q, const typename S::T* K,
                                  const typename S::T* V, const typename S::T* dO, const float* L, const float* D, i64 T,
                                  float scale, int causal) {
  __shared__ float ks[FA_BC][HS];
  __shared__ float vs[FA_BC][HS];
  const i64 bh = blockIdx.y, q0 = (i64)blockIdx.x * FA_BR, qi = q0 + threadIdx.x;
  const i64 off = bh * T * HS;
  const bool active = qi < T;
  float q[HS], g[HS], dq[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) {
    q[d] = active ? S::ld(Q, off + qi * HS + d) : 0.0f;
    g[d] = active ? S::ld(dO, off + qi * HS + d) : 0.0f;
    dq[d] = 0.0f;
  }
  const float li = active ? L[bh * T + qi] : 0.0f, di = active ? D[bh * T + qi] : 0.0f;
  const i64 kend = causal ? min(T, q0 + FA_BR) : T;
  for (i64 k0 = 0; k0 < kend; k0 += FA_BC) {
    for (int e = threadIdx.x; e < FA_BC * HS; e += blockDim.x) {
      int j = e / HS, d = e % HS;
      bool in = k0 + j < T;
      ks[j][d] = in ? S::ld(K, off + (k0 + j) * HS + d) : 0.0f;
      vs[j][d] = in ? S::ld(V, off + (k0 + j) * HS + d) : 0.0f;
    }
    __syncthreads();
    if (active) {
#pragma unroll 1
      for (int j = 0; j < FA_BC; j++) {
        i64 kj = k0 + j;
        if (kj >= T || (causal && kj > qi)) continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; d++) {
          s += q[d] * ks[j][d];
          dp += g[d] * vs[j][d];
        }
        float ds = __expf(s * scale - li) * (dp - di);
#pragma unroll
        for (int d = 0; d < HS; d++) dq[d] += ds * ks[j][d];
      }
    }
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < HS; d++) S::st(dQ, off + qi * HS + d, dq[d] * scale);
  }
}

#define FLASH(NAME, S, HS)                                                                                    \
  extern "C" __global__ void __launch_bounds__(FA_BR) flash_fwd_##NAME##_##HS(                               \
      S::T* O, float* L, const S::T* Q, const S::T* K, const S::T* V, i64 T, float scale, int causal) {      \
    flash_fwd_impl<S, HS>(O, L, Q, K, V, T, scale, causal);                                                 \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(KV_BK(HS)) flash_bwd_dkdv_##NAME##_##HS(                      \
      S::T* dK, S::T* dV, const S::T* Q, const S::T* K, const S::T* V, const S::T* dO, const float* L,       \
      const float* D, i64 T, float scale, int causal) {                                                     \
    flash_bwd_dkdv_impl<S, HS>(dK, dV, Q, K, V, dO, L, D, T, scale, causal);                                \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(FA_BR) flash_bwd_dq_##NAME##_##HS(                            \
      S::T* dQ, const S::T* Q, const S::T* K, const S::T* V, const S::T* dO, const float* L, const float* D, \
      i64 T, float scale, int causal) {                                                                      \
    flash_bwd_dq_impl<S, HS>(dQ, Q, K, V, dO, L, D, T, scale, causal);                                      \
  }

// The Go side appends the instantiation it needs, e.g. FLASH(bf16, BF16S, 64), so that
// each (dtype, HS) variant is compiled only when used.

extern "C" __global__ void flash_bwd_pre_bf16(float* D, const u16* O, const u16* dO, i64 rows, i64 hs) {
  flash_bwd_pre_impl<BF16S>(D, O, dO, rows, hs);
}
extern "C" __global__ void flash_bwd_pre_f32(float* D, const float* O, const float* dO, i64 rows, i64 hs) {
  flash_bwd_pre_impl<F32S>(D, O, dO, rows, hs);
}
