// attention.cu: fused (flash-style) attention, forward and backward, for q and out
// [B, NH, Tq, HS] over k and v [B, G, Tk, HS] (G key/value heads, each serving
// FP.group = NH/G consecutive query heads) in bf16 or f32, computing in float. The forward
// keeps, per query, a running max and sum of the softmax over key tiles held in shared
// memory and writes out and the log-sum-exp L [B·NH, Tq] (F32; −∞ and out 0 for a query
// that sees no key); the scores [Tq, Tk] are never stored. The backward recomputes them
// tile by tile: one kernel gives dK and dV (a thread per key, summing over the group's
// query heads in order), another dQ (a thread per query), both deterministic. Causal
// attention hides key j from query i when j > i + Tk − Tq. Attention dropout zeroes
// probability (b, h, i, j) when the uniform draw (prelude.cu's uniform_at) of its index
// in the full probability tensor, FP.dbase + b·ds0 + h·ds1 + i·ds2 + j, is below FP.drop,
// and scales the others by 1/(1−drop): the CPU backend's mask. A padding mask (any
// dtype, broadcast to [B, NH, Tq, Tk] by the strides FP.ms, non-zero hides) and document
// segments (I32 [B, Tk]: key j hidden from query i when seg[b, j] ≠ seg[b, i + Tk − Tq])
// hide keys as causality does. An additive bias (q's dtype, broadcast by the strides
// FP.bs) joins the logits: scale·q·kᵀ + bias; for its gradient the dQ kernel writes the
// logits' gradient dS [B·NH, Tq, Tk] (F32) to FP.dsout, which attn_dbias sums over the
// bias's broadcast dims. One thread per row, plain
// FMAs: no tensor cores yet. HS is a template parameter (32, 64, 128) so rows live in
// registers. The forward also reads keys and values in place from KV-cache slots
// [B, G, L, HS] of which the first Tk positions are attended (FP.Lkv = L apart per head).

// FP are a call's parameters, passed by value (cuda/fused_attention.go's flashParams).
struct FP {
  i64 Tq, Tk, group, nh;
  float scale;
  int causal;
  double drop;
  u32 k0, k1;
  i64 ds0, ds1, ds2, dbase;
  const void* mask;  // may be null
  i64 ms[4];
  int mdt;
  const int* seg;  // may be null
  const void* bias;  // may be null
  i64 bs[4];
  int bdt;
  float* dsout;  // may be null
  i64 Lkv;  // rows of a key/value head in K and V: Tk, or a KV-cache slot's length (forward)
};

// fp_bias returns the bias of logit (bh, qi, kj), 0 without one.
__device__ __forceinline__ float fp_bias(const FP& f, i64 bh, i64 qi, i64 kj) {
  if (!f.bias) return 0.0f;
  i64 b = bh / f.nh, h = bh - b * f.nh;
  return ld_f(f.bias, f.bdt, b * f.bs[0] + h * f.bs[1] + qi * f.bs[2] + kj * f.bs[3]);
}

// fp_kend returns the end of the keys query tile [q0, q0 + n) may see.
__device__ __forceinline__ i64 fp_kend(const FP& f, i64 q0, i64 n) {
  if (!f.causal) return f.Tk;
  return max((i64)0, min(f.Tk, q0 + n + f.Tk - f.Tq));
}

// fp_visible reports whether query qi of row bh (of B·NH) sees key kj.
__device__ __forceinline__ bool fp_visible(const FP& f, i64 bh, i64 qi, i64 kj) {
  if (kj >= f.Tk || (f.causal && kj > qi + f.Tk - f.Tq)) return false;
  if (!f.mask && !f.seg) return true;
  i64 b = bh / f.nh, h = bh - b * f.nh;
  if (f.mask && ld_d(f.mask, f.mdt, b * f.ms[0] + h * f.ms[1] + qi * f.ms[2] + kj * f.ms[3]) != 0.0) return false;
  return !f.seg || f.seg[b * f.Tk + kj] == f.seg[b * f.Tk + qi + f.Tk - f.Tq];
}

// fp_keep returns the dropout factor of probability (bh, qi, kj): 0 or 1/(1−drop).
__device__ __forceinline__ float fp_keep(const FP& f, i64 bh, i64 qi, i64 kj) {
  if (f.drop <= 0) return 1.0f;
  i64 b = bh / f.nh, h = bh - b * f.nh;
  u64 e = (u64)(f.dbase + b * f.ds0 + h * f.ds1 + qi * f.ds2 + kj);
  return uniform_at(e, f.k0, f.k1) < f.drop ? 0.0f : (float)(1.0 / (1.0 - f.drop));
}

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
                               const typename S::T* V, const FP& f) {
  __shared__ float ks[FA_BC][HS];
  __shared__ float vs[FA_BC][HS];
  __shared__ float sc[FA_BR][FA_BC + 1];
  const i64 bh = blockIdx.y, q0 = (i64)blockIdx.x * FA_BR, qi = q0 + threadIdx.x;
  const i64 qoff = bh * f.Tq * HS, kvoff = (bh / f.group) * f.Lkv * HS;
  const bool active = qi < f.Tq;
  float q[HS], acc[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) {
    q[d] = active ? S::ld(Q, qoff + qi * HS + d) * f.scale : 0.0f;
    acc[d] = 0.0f;
  }
  float m = NEG_INF, l = 0.0f;
  const i64 kend = fp_kend(f, q0, FA_BR);
  for (i64 k0 = 0; k0 < kend; k0 += FA_BC) {
    for (int e = threadIdx.x; e < FA_BC * HS; e += blockDim.x) {
      int j = e / HS, d = e % HS;
      bool in = k0 + j < f.Tk;
      ks[j][d] = in ? S::ld(K, kvoff + (k0 + j) * HS + d) : 0.0f;
      vs[j][d] = in ? S::ld(V, kvoff + (k0 + j) * HS + d) : 0.0f;
    }
    __syncthreads();
    if (active) {
      // Scores of this tile (in shared memory, padded against bank conflicts), then
      // one rescale of the running sums per tile. The sum l is of the probabilities
      // before dropout; the accumulator adds the dropped ones.
      float mt = NEG_INF;
#pragma unroll 1
      for (int j = 0; j < FA_BC; j++) {
        i64 kj = k0 + j;
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; d++) dot += q[d] * ks[j][d];
        float sj = fp_visible(f, bh, qi, kj) ? dot + fp_bias(f, bh, qi, kj) : NEG_INF;
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
          if (p != 0.0f) p *= fp_keep(f, bh, qi, k0 + j);
#pragma unroll
          for (int d = 0; d < HS; d++) acc[d] += p * vs[j][d];
        }
        m = mn;
      }
    }
    __syncthreads();
  }
  if (active) {
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int d = 0; d < HS; d++) S::st(O, qoff + qi * HS + d, acc[d] * inv);
    L[bh * f.Tq + qi] = l > 0.0f ? m + logf(l) : NEG_INF;
  }
}

// flash_bwd_pre: D[row] = Σ_d dO[row, d]·O[row, d] − dL[row] for every row of
// [B·NH·Tq, hs] (dL, the log-sum-exp's gradient, may be null: zeros).
template <typename S>
__device__ void flash_bwd_pre_impl(float* D, const typename S::T* O, const typename S::T* dO, const float* dL,
                                   i64 rows, i64 hs) {
  GRID_STRIDE(r, rows) {
    float s = 0.0f;
    for (i64 d = 0; d < hs; d++) s += S::ld(dO, r * hs + d) * S::ld(O, r * hs + d);
    D[r] = dL ? s - dL[r] : s;
  }
}

// Tiles of the dK/dV kernel: keys per block (a thread each) and queries per tile.
#define KV_BK(HS) ((HS) <= 64 ? 64 : 32)
#define KV_BQ(HS) ((HS) <= 64 ? 16 : 8)

// flash_bwd_dkdv: block (x, y) computes dK and dV of keys [x·BK, (x+1)·BK) of key/value
// head y (of B·G), over the group's query heads in order. With P = e^(s·scale − L) and
// Z the dropout factor: dV += P·Z·dO, dS = P·(Z·dP − D), dK += dS·q·scale.
template <typename S, int HS>
__device__ void flash_bwd_dkdv_impl(typename S::T* dK, typename S::T* dV, const typename S::T* Q,
                                    const typename S::T* K, const typename S::T* V, const typename S::T* dO,
                                    const float* L, const float* D, const FP& f) {
  const int BK = KV_BK(HS), BQ = KV_BQ(HS);
  __shared__ float kt[KV_BK(HS)][HS + 1];  // padded: each thread reads its own row
  __shared__ float vt[KV_BK(HS)][HS + 1];
  __shared__ float qt[KV_BQ(HS)][HS];
  __shared__ float got[KV_BQ(HS)][HS];
  __shared__ float lt[KV_BQ(HS)], dt[KV_BQ(HS)];
  const i64 kvh = blockIdx.y, j0 = (i64)blockIdx.x * BK, kj = j0 + threadIdx.x;
  const i64 kvoff = kvh * f.Tk * HS;
  for (int e = threadIdx.x; e < BK * HS; e += blockDim.x) {
    int j = e / HS, d = e % HS;
    bool in = j0 + j < f.Tk;
    kt[j][d] = in ? S::ld(K, kvoff + (j0 + j) * HS + d) : 0.0f;
    vt[j][d] = in ? S::ld(V, kvoff + (j0 + j) * HS + d) : 0.0f;
  }
  float dk[HS], dv[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) dk[d] = dv[d] = 0.0f;
  // Queries before qstart see none of this block's keys.
  const i64 qstart = f.causal ? max((i64)0, j0 - (f.Tk - f.Tq)) : 0;
  for (i64 hq = 0; hq < f.group; hq++) {
    const i64 bh = kvh * f.group + hq, qoff = bh * f.Tq * HS;
    for (i64 i0 = qstart; i0 < f.Tq; i0 += BQ) {
      __syncthreads();
      for (int e = threadIdx.x; e < BQ * HS; e += blockDim.x) {
        int i = e / HS, d = e % HS;
        bool in = i0 + i < f.Tq;
        qt[i][d] = in ? S::ld(Q, qoff + (i0 + i) * HS + d) : 0.0f;
        got[i][d] = in ? S::ld(dO, qoff + (i0 + i) * HS + d) : 0.0f;
      }
      for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
        bool in = i0 + i < f.Tq;
        lt[i] = in ? L[bh * f.Tq + i0 + i] : 0.0f;
        dt[i] = in ? D[bh * f.Tq + i0 + i] : 0.0f;
      }
      __syncthreads();
      if (kj >= f.Tk) continue;
#pragma unroll 1
      for (int i = 0; i < BQ; i++) {
        i64 qi = i0 + i;
        if (qi >= f.Tq || !fp_visible(f, bh, qi, kj)) continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; d++) {
          s += qt[i][d] * kt[threadIdx.x][d];
          dp += got[i][d] * vt[threadIdx.x][d];
        }
        float p = __expf(s * f.scale + fp_bias(f, bh, qi, kj) - lt[i]);
        float z = fp_keep(f, bh, qi, kj);
        float ds = p * (z * dp - dt[i]), pz = p * z;
#pragma unroll
        for (int d = 0; d < HS; d++) {
          dv[d] += pz * got[i][d];
          dk[d] += ds * qt[i][d];
        }
      }
    }
  }
  if (kj < f.Tk) {
#pragma unroll
    for (int d = 0; d < HS; d++) {
      S::st(dK, kvoff + kj * HS + d, dk[d] * f.scale);
      S::st(dV, kvoff + kj * HS + d, dv[d]);
    }
  }
}

template <typename S, int HS>
__device__ void flash_bwd_dq_impl(typename S::T* dQ, const typename S::T* Q, const typename S::T* K,
                                  const typename S::T* V, const typename S::T* dO, const float* L, const float* D,
                                  const FP& f) {
  __shared__ float ks[FA_BC][HS];
  __shared__ float vs[FA_BC][HS];
  const i64 bh = blockIdx.y, q0 = (i64)blockIdx.x * FA_BR, qi = q0 + threadIdx.x;
  const i64 qoff = bh * f.Tq * HS, kvoff = (bh / f.group) * f.Tk * HS;
  const bool active = qi < f.Tq;
  float q[HS], g[HS], dq[HS];
#pragma unroll
  for (int d = 0; d < HS; d++) {
    q[d] = active ? S::ld(Q, qoff + qi * HS + d) : 0.0f;
    g[d] = active ? S::ld(dO, qoff + qi * HS + d) : 0.0f;
    dq[d] = 0.0f;
  }
  const float li = active ? L[bh * f.Tq + qi] : 0.0f, di = active ? D[bh * f.Tq + qi] : 0.0f;
  const i64 kend = fp_kend(f, q0, FA_BR);
  for (i64 k0 = 0; k0 < kend; k0 += FA_BC) {
    for (int e = threadIdx.x; e < FA_BC * HS; e += blockDim.x) {
      int j = e / HS, d = e % HS;
      bool in = k0 + j < f.Tk;
      ks[j][d] = in ? S::ld(K, kvoff + (k0 + j) * HS + d) : 0.0f;
      vs[j][d] = in ? S::ld(V, kvoff + (k0 + j) * HS + d) : 0.0f;
    }
    __syncthreads();
    if (active) {
#pragma unroll 1
      for (int j = 0; j < FA_BC; j++) {
        i64 kj = k0 + j;
        if (!fp_visible(f, bh, qi, kj)) continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; d++) {
          s += q[d] * ks[j][d];
          dp += g[d] * vs[j][d];
        }
        float ds = __expf(s * f.scale + fp_bias(f, bh, qi, kj) - li) * (fp_keep(f, bh, qi, kj) * dp - di);
        if (f.dsout) f.dsout[(bh * f.Tq + qi) * f.Tk + kj] = ds;
#pragma unroll
        for (int d = 0; d < HS; d++) dq[d] += ds * ks[j][d];
      }
    }
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < HS; d++) S::st(dQ, qoff + qi * HS + d, dq[d] * f.scale);
  }
}

// SC is one call of flash_fwd_slots: its operands, its queries (Tq) and attended keys
// (Tk); the slots' length (FP.Lkv) is the launch's.
struct SC {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* l;
  i64 tq, tk;
};

#define FLASH(NAME, S, HS)                                                                                    \
  extern "C" __global__ void __launch_bounds__(FA_BR) flash_fwd_##NAME##_##HS(                               \
      S::T* O, float* L, const S::T* Q, const S::T* K, const S::T* V, FP f) {                                \
    flash_fwd_impl<S, HS>(O, L, Q, K, V, f);                                                                \
  }                                                                                                          \
  /* Several calls of one launch (calls[blockIdx.z]), f holding what they share. */                         \
  extern "C" __global__ void __launch_bounds__(FA_BR) flash_fwd_slots_##NAME##_##HS(const SC* calls, FP f) { \
    const SC c = calls[blockIdx.z];                                                                          \
    if ((i64)blockIdx.x * FA_BR >= c.tq) return;                                                             \
    f.Tq = c.tq;                                                                                             \
    f.Tk = c.tk;                                                                                             \
    flash_fwd_impl<S, HS>((S::T*)c.o, c.l, (const S::T*)c.q, (const S::T*)c.k, (const S::T*)c.v, f);        \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(KV_BK(HS)) flash_bwd_dkdv_##NAME##_##HS(                      \
      S::T* dK, S::T* dV, const S::T* Q, const S::T* K, const S::T* V, const S::T* dO, const float* L,       \
      const float* D, FP f) {                                                                                \
    flash_bwd_dkdv_impl<S, HS>(dK, dV, Q, K, V, dO, L, D, f);                                               \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(FA_BR) flash_bwd_dq_##NAME##_##HS(                            \
      S::T* dQ, const S::T* Q, const S::T* K, const S::T* V, const S::T* dO, const float* L, const float* D, \
      FP f) {                                                                                                \
    flash_bwd_dq_impl<S, HS>(dQ, Q, K, V, dO, L, D, f);                                                     \
  }

// The Go side appends the instantiation it needs, e.g. FLASH(bf16, BF16S, 64), so that
// each (dtype, HS) variant is compiled only when used.

extern "C" __global__ void flash_bwd_pre_bf16(float* D, const u16* O, const u16* dO, const float* dL, i64 rows,
                                              i64 hs) {
  flash_bwd_pre_impl<BF16S>(D, O, dO, dL, rows, hs);
}
extern "C" __global__ void flash_bwd_pre_f32(float* D, const float* O, const float* dO, const float* dL, i64 rows,
                                             i64 hs) {
  flash_bwd_pre_impl<F32S>(D, O, dO, dL, rows, hs);
}

// attn_dbias sets dbias (dtype dt, shape bshape: [B, NH, Tq, Tk] with 1 along broadcast
// dims) to the sums of ds [B, NH, Tq, Tk] over those dims, in double, in a fixed order.
extern "C" __global__ void attn_dbias(void* dbias, int dt, const float* ds, i64 B, i64 NH, i64 Tq, i64 Tk, i64 s0,
                                      i64 s1, i64 s2, i64 s3) {
  GRID_STRIDE(e, s0 * s1 * s2 * s3) {
    i64 c3 = e % s3, r = e / s3, c2 = r % s2;
    r /= s2;
    i64 c1 = r % s1, c0 = r / s1;
    double acc = 0;
    for (i64 b = (s0 == 1 ? 0 : c0); b < (s0 == 1 ? B : c0 + 1); b++)
      for (i64 h = (s1 == 1 ? 0 : c1); h < (s1 == 1 ? NH : c1 + 1); h++)
        for (i64 i = (s2 == 1 ? 0 : c2); i < (s2 == 1 ? Tq : c2 + 1); i++)
          for (i64 j = (s3 == 1 ? 0 : c3); j < (s3 == 1 ? Tk : c3 + 1); j++)
            acc += (double)ds[((b * NH + h) * Tq + i) * Tk + j];
    st_d(dbias, dt, e, acc);
  }
}
