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
// loss = (1−ε)(lse − x[t]) + ε(lse − mean(x)); ignored rows get 0 and 0. loss has dtype
// ldt and lse sdt.
template <typename C>
__device__ void ce_fwd_impl(void* loss, int ldt, void* lse, int sdt, const void* logits, int dt, const void* tg, int tdt,
                            i64 n, i64 v, int ignore, i64 ignoreIndex, double eps, ErrFlag* err, int op) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    i64 t = ld_index(tg, tdt, r);
    bool ign = ce_ignored(t, ignore, ignoreIndex);
    if (ign || t < 0 || t >= v) {
      if (threadIdx.x == 0) {
        if (!ign) report_index(err, op, r, t, v);
        IO<C>::st(loss, ldt, r, (C)0);
        IO<C>::st(lse, sdt, r, (C)0);
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
      IO<C>::st(loss, ldt, r, ((C)1 - (C)eps) * nll + (C)eps * (l - sum / (C)v));
      IO<C>::st(lse, sdt, r, l);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) ce_fwd_f(void* loss, int ldt, void* lse, int sdt, const void* logits, int dt, const void* tg,
                                    int tdt, i64 n, i64 v, int ignore, i64 ignoreIndex, double eps, ErrFlag* err,
                                    int op) {
  ce_fwd_impl<float>(loss, ldt, lse, sdt, logits, dt, tg, tdt, n, v, ignore, ignoreIndex, eps, err, op);
}
extern "C" __global__ void __launch_bounds__(1024) ce_fwd_d(void* loss, int ldt, void* lse, int sdt, const void* logits, int dt, const void* tg,
                                    int tdt, i64 n, i64 v, int ignore, i64 ignoreIndex, double eps, ErrFlag* err,
                                    int op) {
  ce_fwd_impl<double>(loss, ldt, lse, sdt, logits, dt, tg, tdt, n, v, ignore, ignoreIndex, eps, err, op);
}

// ce_bwd: dlogits = g·(e^(x − lse) − ε/V − (1−ε)·[j = t]) with g = dloss[r] (dtype
// gdt; lse has dtype sdt); ignored rows get zeros. dlogits may be logits (in place).
template <typename C>
__device__ void ce_bwd_impl(void* dlogits, const void* logits, int dt, const void* tg, int tdt, const void* lse, int sdt,
                            const void* dloss, int gdt, i64 n, i64 v, int ignore, i64 ignoreIndex, double eps) {
  GRID_STRIDE(e, n * v) {
    i64 r = e / v, j = e - r * v;
    i64 t = ld_index(tg, tdt, r);
    if (ce_ignored(t, ignore, ignoreIndex)) {
      IO<C>::st(dlogits, dt, e, (C)0);
      continue;
    }
    C q = exp(IO<C>::ld(logits, dt, e) - IO<C>::ld(lse, sdt, r)) - (C)eps / (C)v;
    if (j == t) q -= (C)1 - (C)eps;
    IO<C>::st(dlogits, dt, e, IO<C>::ld(dloss, gdt, r) * q);
  }
}

extern "C" __global__ void ce_bwd_f(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                    const void* lse, int sdt, const void* dloss, int gdt, i64 n, i64 v, int ignore,
                                    i64 ignoreIndex, double eps) {
  ce_bwd_impl<float>(dlogits, logits, dt, tg, tdt, lse, sdt, dloss, gdt, n, v, ignore, ignoreIndex, eps);
}
extern "C" __global__ void ce_bwd_d(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                    const void* lse, int sdt, const void* dloss, int gdt, i64 n, i64 v, int ignore,
                                    i64 ignoreIndex, double eps) {
  ce_bwd_impl<double>(dlogits, logits, dt, tg, tdt, lse, sdt, dloss, gdt, n, v, ignore, ignoreIndex, eps);
}

// Vocab-parallel cross entropy (tensor.Backend's VocabCrossEntropy*): this rank's logits
// [N, W] are global columns [start, start+W), of which the first local = min(W,
// vocab−start) are classes and the rest padding. The forward writes per-row statistics
// that ranks combine (max, then sums), the loss is formed from the combined ones, and
// the backward recomputes the softmax from the logits: probabilities are never stored.

__device__ __forceinline__ bool vce_ignored(i64 t, int ignore, i64 ignoreIndex) { return ignore && t == ignoreIndex; }

// vce_stats: stats (F64 [4, N]) = {m = max over class columns (−Inf without any),
// Σ e^(x−m), the target's logit when this rank holds it else 0, Σ x}; zeros for ignored
// rows. One block per row; exponentials in float, sums in double.
extern "C" __global__ void __launch_bounds__(1024) vce_stats(double* stats, const void* logits, int dt, const void* tg, int tdt, i64 n, i64 w,
                                     i64 local, i64 start, i64 vocab, int ignore, i64 ignoreIndex, ErrFlag* err,
                                     int op) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    i64 t = ld_index(tg, tdt, r);
    if (vce_ignored(t, ignore, ignoreIndex)) {
      if (threadIdx.x == 0) stats[r] = stats[n + r] = stats[2 * n + r] = stats[3 * n + r] = 0.0;
      continue;
    }
    if (threadIdx.x == 0 && (t < 0 || t >= vocab)) report_index(err, op, r, t, vocab);
    double mx = (double)NEG_INF, sx = 0.0;
    for (i64 j = threadIdx.x; j < local; j += blockDim.x) {
      double x = ld_d(logits, dt, r * w + j);
      mx = nan_max(mx, x);
      sx += x;
    }
    mx = block_max(mx);
    sx = block_sum(sx);
    double s = 0.0;
    if (mx != (double)NEG_INF) {
      for (i64 j = threadIdx.x; j < local; j += blockDim.x) {
        if (dt == DT_F64) {
          s += exp(ld_d(logits, dt, r * w + j) - mx);
        } else {
          s += (double)expf(ld_f(logits, dt, r * w + j) - (float)mx);
        }
      }
    }
    s = block_sum(s);
    if (threadIdx.x == 0) {
      i64 c = t - start;
      stats[r] = mx;
      stats[n + r] = s;
      stats[2 * n + r] = (c >= 0 && c < local) ? ld_d(logits, dt, r * w + c) : 0.0;
      stats[3 * n + r] = sx;
    }
  }
}

// vce_loss: loss[r] = M + ln S − (1−ε)·x_t − ε·Σx/vocab from the combined statistics, 0
// for ignored rows (the ε term only when ε ≠ 0: Σx may be −Inf).
extern "C" __global__ void vce_loss(void* loss, int ldt, const double* stats, const void* tg, int tdt, i64 n, i64 vocab,
                                    int ignore, i64 ignoreIndex, double eps) {
  GRID_STRIDE(r, n) {
    if (vce_ignored(ld_index(tg, tdt, r), ignore, ignoreIndex)) {
      st_d(loss, ldt, r, 0.0);
      continue;
    }
    double l = stats[r] + log(stats[n + r]) - (1.0 - eps) * stats[2 * n + r];
    if (eps != 0.0) l -= eps * stats[3 * n + r] / (double)vocab;
    st_d(loss, ldt, r, l);
  }
}

// vce_bwd: dlogits[r, c] = g·(e^(x−M)/S − ε/vocab − (1−ε)·[start + c = t]) on class
// columns, 0 on padding columns and ignored rows; g = dloss[r]. dlogits may be logits.
extern "C" __global__ void vce_bwd(void* dlogits, const void* logits, int dt, const void* tg, int tdt,
                                   const double* stats, const void* dloss, int gdt, i64 n, i64 w, i64 local, i64 start,
                                   i64 vocab, int ignore, i64 ignoreIndex, double eps) {
  GRID_STRIDE(e, n * w) {
    i64 r = e / w, c = e - r * w;
    i64 t = ld_index(tg, tdt, r);
    if (vce_ignored(t, ignore, ignoreIndex) || c >= local) {
      st_f(dlogits, dt, e, 0.0f);
      continue;
    }
    double m = stats[r], s = stats[n + r], g = ld_d(dloss, gdt, r);
    if (start + c == t || dt == DT_F64) {
      double q = exp(ld_d(logits, dt, e) - m) / s - eps / (double)vocab;
      if (start + c == t) q -= 1.0 - eps;
      st_d(dlogits, dt, e, g * q);
    } else {
      float a = (float)(g / s), b = (float)(-g * eps / (double)vocab);
      st_f(dlogits, dt, e, a * expf(ld_f(logits, dt, e) - (float)m) + b);
    }
  }
}
