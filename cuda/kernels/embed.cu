// embed.cu: embedding lookups and their backward, GPT's fused token + position
// embedding, cross entropy over full logits and over a vocab-parallel shard of them.

// embedding_N: dst[i, :] = w[ids[i], :] for rows of c elements of N bytes; an id outside
// [0, v) is reported and gives a zero row.
#define EMBEDDING(N, T)                                                                              \
  extern "C" __global__ void embedding_##N(T* dst, const T* w, const void* ids, int idt, i64 nids, i64 c, \
                                           i64 v, ErrFlag* err, int op) {                           \
    GRID_STRIDE(t, nids * c) {                                                                      \
      i64 i = t / c, j = t - i * c;                                                                 \
      i64 id = ld_index(ids, idt, i);                                                               \
      if (id < 0 || id >= v) {                                                                      \
        if (j == 0) report_index(err, op, i, id, v);                                                \
        dst[t] = 0;                                                                                 \
        continue;                                                                                   \
      }                                                                                             \
      dst[t] = w[id * c + j];                                                                       \
    }                                                                                               \
  }
EMBEDDING(2, u16)
EMBEDDING(4, u32)
EMBEDDING(8, u64)

// embedding_bwd: dw[ids[i], :] += dy[i, :] (atomically).
extern "C" __global__ void embedding_bwd(void* dw, const void* dy, int dt, const void* ids, int idt, i64 nids,
                                         i64 c, i64 v, ErrFlag* err, int op) {
  GRID_STRIDE(t, nids * c) {
    i64 i = t / c, j = t - i * c;
    i64 id = ld_index(ids, idt, i);
    if (id < 0 || id >= v) {
      if (j == 0) report_index(err, op, i, id, v);
      continue;
    }
    atomic_add_dt(dw, dt, id * c + j, ld_d(dy, dt, t));
  }
}

// encoder: out[b, t, :] = wte[ids[b, t], :] + wpe[pos0 + t, :] (GPT-2's input embedding),
// ids [B, T], out [B, T, C], computed in float.
extern "C" __global__ void encoder(void* out, const void* wte, const void* wpe, int dt, const void* ids, int idt,
                                   i64 T, i64 c, i64 v, i64 pos0, i64 n, ErrFlag* err, int op) {
  GRID_STRIDE(e, n * c) {
    i64 i = e / c, j = e - i * c;
    i64 t = i % T;
    i64 id = ld_index(ids, idt, i);
    if (id < 0 || id >= v) {
      if (j == 0) report_index(err, op, i, id, v);
      st_f(out, dt, e, 0.0f);
      continue;
    }
    st_f(out, dt, e, ld_f(wte, dt, id * c + j) + ld_f(wpe, dt, (pos0 + t) * c + j));
  }
}

// encoder_bwd: dwte[ids[b,t]] += dout[b,t]; dwpe[pos0 + t] += dout[b,t] (atomically).
extern "C" __global__ void encoder_bwd(void* dwte, void* dwpe, const void* dout, int dt, const void* ids, int idt,
                                       i64 T, i64 c, i64 v, i64 pos0, i64 n) {
  GRID_STRIDE(e, n * c) {
    i64 i = e / c, j = e - i * c;
    i64 id = ld_index(ids, idt, i);
    double g = ld_d(dout, dt, e);
    if (id >= 0 && id < v) atomic_add_dt(dwte, dt, id * c + j, g);
    atomic_add_dt(dwpe, dt, (pos0 + i % T) * c + j, g);
  }
}

__device__ __forceinline__ bool ce_ignored(i64 t, int ignore, i64 ignoreIndex) { return ignore && t == ignoreIndex; }

// ce_fwd: one block per row of logits [N, V]: lse = max + log Σ e^(x − max),
// loss = (1−ε)(lse − x[t]) + ε(lse − mean(x)); ignored rows get 0 and 0.
template <typename C>
__device__ void ce_fwd_impl(void* loss, void* lse, const void* logits, int dt, const void* tg, int tdt, i64 n, i64 v,
                            int ignore, i64 ignoreIndex, double eps, ErrFlag* err, int op) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    i64 t = ld_index(tg, tdt, r);
    if (ce_ignored(t, ignore, ignoreIndex) || t < 0 || t >= v) {
      if (!ce_ignored(t, ignore, ignoreIndex) && threadIdx.x == 0) report_index(err, op, r, t, v);
      if (threadIdx.x == 0) {
        IO<C>::st(loss, dt, r, (C)0);
        IO<C>::st(lse, dt, r, (C)0);
      }
      continue;
    }
    C mx = (C)NEG_INF, sum = 0;
    for (i64 j = threadIdx.x; j < v; j += blockDim.x) {
      C x = IO<C>::ld(logits, dt, r * v + j);
      mx = nan_max(mx, x);
      sum += x;
    }
    mx = block_max(mx);
    sum = block_sum(sum);
    C s = 0;
    for (i64 j = threadIdx.x; j < v; j += blockDim.x) s += exp(IO<C>::ld(logits, dt, r * v + j) - mx);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      C l = mx + log(s);
      C nll = l - IO<C>::ld(logits, dt, r * v + t);
      IO<C>::st(loss, dt, r, ((C)1 - (C)eps) * nll + (C)eps * (l - sum / (C)v));
      IO<C>::st(lse, dt, r, l);
    }
  }
}

extern "C" __global__ void ce_fwd_f(void* loss, void* lse, const void* logits, int dt, const void* tg, int tdt, i64 n,
                                    i64 v, int ignore, i64 ignoreIndex, double eps, ErrFlag* err, int op) {
  ce_fwd_impl<float>(loss, lse, logits, dt, tg, tdt, n, v, ignore, ignoreIndex, eps, err, op);
}
extern "C" __global__ void ce_fwd_d(void* loss, void* lse, const void* logits, int dt, const void* tg, int tdt, i64 n,
                                    i64 v, int ignore, i64 ignoreIndex, double eps, ErrFlag* err, int op) {
  ce_fwd_impl<double>(loss, lse, logits, dt, tg, tdt, n, v, ignore, ignoreIndex, eps, err, op);
}

// ce_bwd: dlogits = g·(e^(x − lse) − ε/V − (1−ε)·[j = t]) with g = dloss[r]; ignored
// rows get zeros. dlogits may be logits (in place).
template <typename C>
__device__ void ce_bwd_impl(void* dlogits, const void* logits, int dt, const void* tg, int tdt, const void* lse,
                            const void* dloss, i64 n, i64 v, int ignore, i64 ignoreIndex, double eps) {
  GRID_STRIDE(e, n * v) {
    i64 r = e / v, j = e - r * v;
    i64 t = ld_index(tg, tdt, r);
    if (ce_ignored(t, ignore, ignoreIndex)) {
      IO<C>::st(dlogits, dt, e, (C)0);
      continue;
    }
    C q = exp(IO<C>::ld(logits, dt, e) - IO<C>::ld(lse, dt, r)) - (C)eps / (C)v;
    if (j == t) q -= (C)1 - (C)eps;
    IO<C>::st(dlogits, dt, e, IO<C>::ld(dloss, dt, r) * q);
  }
}

extern "C" __global__ void ce_bwd_f(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                    const void* lse, const void* dloss, i64 n, i64 v, int ignore, i64 ignoreIndex,
                                    double eps) {
  ce_bwd_impl<float>(dlogits, logits, dt, tg, tdt, lse, dloss, n, v, ignore, ignoreIndex, eps);
}
extern "C" __global__ void ce_bwd_d(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                    const void* lse, const void* dloss, i64 n, i64 v, int ignore, i64 ignoreIndex,
                                    double eps) {
  ce_bwd_impl<double>(dlogits, logits, dt, tg, tdt, lse, dloss, n, v, ignore, ignoreIndex, eps);
}

// Vocab-parallel cross entropy: each rank holds logits [N, Vs] for global vocab ids
// [vstart, vstart + Vs). Three kernels around two all-reduces (max, then sums), never
// materializing probabilities; the backward recomputes them from the logits and lse.

// vpce_max: rowmax[r] = max_j logits[r, j] (F32), to be all-reduced with max.
extern "C" __global__ void vpce_max(float* rowmax, const void* logits, int dt, i64 n, i64 vs) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    float mx = NEG_INF;
    for (i64 j = threadIdx.x; j < vs; j += blockDim.x) mx = nan_max(mx, ld_f(logits, dt, r * vs + j));
    mx = block_max(mx);
    if (threadIdx.x == 0) rowmax[r] = mx;
  }
}

// vpce_sums: sums[r] = {Σ_j e^(x − M), x[t] if t is in this shard else 0, Σ_j x} with the
// global max M = rowmax[r] (F32 [N, 3]), to be all-reduced with sum.
extern "C" __global__ void vpce_sums(float* sums, const void* logits, int dt, const void* tg, int tdt,
                                     const float* rowmax, i64 n, i64 vs, i64 vstart) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    float M = rowmax[r], s = 0, sx = 0;
    for (i64 j = threadIdx.x; j < vs; j += blockDim.x) {
      float x = ld_f(logits, dt, r * vs + j);
      s += expf(x - M);
      sx += x;
    }
    s = block_sum(s);
    sx = block_sum(sx);
    if (threadIdx.x == 0) {
      i64 t = ld_index(tg, tdt, r) - vstart;
      sums[3 * r] = s;
      sums[3 * r + 1] = (t >= 0 && t < vs) ? ld_f(logits, dt, r * vs + t) : 0.0f;
      sums[3 * r + 2] = sx;
    }
  }
}

// vpce_loss: lse = M + log S; loss = (1−ε)(lse − x[t]) + ε(lse − Σx/V) for the global
// vocab size V; ignored rows get 0 and 0 (loss and lse F32 [N]).
extern "C" __global__ void vpce_loss(float* loss, float* lse, const float* sums, const float* rowmax, const void* tg,
                                     int tdt, i64 n, i64 vglobal, int ignore, i64 ignoreIndex, double eps,
                                     ErrFlag* err, int op) {
  GRID_STRIDE(r, n) {
    i64 t = ld_index(tg, tdt, r);
    if (ce_ignored(t, ignore, ignoreIndex)) {
      loss[r] = 0;
      lse[r] = 0;
      continue;
    }
    if (t < 0 || t >= vglobal) report_index(err, op, r, t, vglobal);
    float l = rowmax[r] + logf(sums[3 * r]);
    float e = (float)eps;
    loss[r] = (1.0f - e) * (l - sums[3 * r + 1]) + e * (l - sums[3 * r + 2] / (float)vglobal);
    lse[r] = l;
  }
}

// vpce_bwd: dlogits[r, j] = dloss[r]·(e^(x − lse) − ε/V − (1−ε)·[vstart + j = t]);
// dlogits may be logits (in place).
extern "C" __global__ void vpce_bwd(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                    const float* lse, const float* dloss, i64 n, i64 vs, i64 vstart, i64 vglobal,
                                    int ignore, i64 ignoreIndex, double eps) {
  GRID_STRIDE(e, n * vs) {
    i64 r = e / vs, j = e - r * vs;
    i64 t = ld_index(tg, tdt, r);
    if (ce_ignored(t, ignore, ignoreIndex)) {
      st_f(dlogits, dt, e, 0.0f);
      continue;
    }
    float q = expf(ld_f(logits, dt, e) - lse[r]) - (float)eps / (float)vglobal;
    if (vstart + j == t) q -= 1.0f - (float)eps;
    st_f(dlogits, dt, e, dloss[r] * q);
  }
}
