// reduce.cu: sums and means along a dim, max with its position, gather and scatter-add
// along a dim, and per-range sums of squares. A tensor reduced along dim is seen as
// [outer, n, inner]. Sums accumulate in double, as the CPU backend's do.

// reduce_rows reduces rows of n contiguous elements (inner = 1): one block per row.
template <typename C>
__device__ void reduce_rows_impl(void* dst, int ddt, const void* src, int sdt, i64 rows, i64 n, int mean) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) acc += (double)IO<C>::ld(src, sdt, r * n + j);
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
      if (mean) acc /= (double)n;
      IO<C>::st(dst, ddt, r, (C)acc);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) reduce_rows_f(void* dst, int ddt, const void* src, int sdt, i64 rows, i64 n, int mean) {
  reduce_rows_impl<float>(dst, ddt, src, sdt, rows, n, mean);
}
extern "C" __global__ void __launch_bounds__(1024) reduce_rows_d(void* dst, int ddt, const void* src, int sdt, i64 rows, i64 n, int mean) {
  reduce_rows_impl<double>(dst, ddt, src, sdt, rows, n, mean);
}

// reduce_cols reduces along the middle of [outer, n, inner]: one thread per output
// element, consecutive threads reading consecutive addresses.
template <typename C>
__device__ void reduce_cols_impl(void* dst, int ddt, const void* src, int sdt, i64 outer, i64 n, i64 inner,
                                 int mean) {
  GRID_STRIDE(t, outer * inner) {
    i64 o = t / inner, i = t - o * inner;
    double acc = 0;
    for (i64 k = 0; k < n; k++) acc += (double)IO<C>::ld(src, sdt, (o * n + k) * inner + i);
    if (mean) acc /= (double)n;
    IO<C>::st(dst, ddt, t, (C)acc);
  }
}

extern "C" __global__ void reduce_cols_f(void* dst, int ddt, const void* src, int sdt, i64 outer, i64 n, i64 inner,
                                         int mean) {
  reduce_cols_impl<float>(dst, ddt, src, sdt, outer, n, inner, mean);
}
extern "C" __global__ void reduce_cols_d(void* dst, int ddt, const void* src, int sdt, i64 outer, i64 n, i64 inner,
                                         int mean) {
  reduce_cols_impl<double>(dst, ddt, src, sdt, outer, n, inner, mean);
}

// max_dim sets dst to the maximum along the middle dim and idx (I64) to its first
// position; NaN wins.
template <typename C>
__device__ void max_dim_impl(void* dst, int ddt, i64* idx, const void* src, int sdt, i64 outer, i64 n, i64 inner) {
  GRID_STRIDE(t, outer * inner) {
    i64 o = t / inner, i = t - o * inner;
    i64 base = o * n * inner + i;
    C best = IO<C>::ld(src, sdt, base);
    i64 at = 0;
    for (i64 k = 1; k < n; k++) {
      C v = IO<C>::ld(src, sdt, base + k * inner);
      if (v > best || (v != v && best == best)) {
        best = v;
        at = k;
      }
    }
    IO<C>::st(dst, ddt, t, best);
    idx[t] = at;
  }
}

extern "C" __global__ void max_dim_f(void* dst, int ddt, i64* idx, const void* src, int sdt, i64 outer, i64 n,
                                     i64 inner) {
  max_dim_impl<float>(dst, ddt, idx, src, sdt, outer, n, inner);
}
extern "C" __global__ void max_dim_d(void* dst, int ddt, i64* idx, const void* src, int sdt, i64 outer, i64 n,
                                     i64 inner) {
  max_dim_impl<double>(dst, ddt, idx, src, sdt, outer, n, inner);
}

// gather: dst and idx are [outer, m, inner], src is [outer, n, inner];
// dst[o,k,i] = src[o, idx[o,k,i], i]. An index outside [0, n) is reported and gives 0.
extern "C" __global__ void gather(void* dst, const void* src, int dt, const void* idx, int idt, i64 outer, i64 m,
                                  i64 inner, i64 n, ErrFlag* err, int op) {
  GRID_STRIDE(t, outer * m * inner) {
    i64 o = t / (m * inner), i = t % inner;
    i64 j = ld_index(idx, idt, t);
    if (j < 0 || j >= n) {
      report_index(err, op, t, j, n);
      st_d(dst, dt, t, 0.0);
      continue;
    }
    st_d(dst, dt, t, ld_d(src, dt, (o * n + j) * inner + i));
  }
}

// scatter_add: src and idx are [outer, m, inner], dst is [outer, n, inner];
// dst[o, idx[o,k,i], i] += src[o,k,i] (atomically; the order of additions varies).
extern "C" __global__ void scatter_add(void* dst, const void* src, int dt, const void* idx, int idt, i64 outer,
                                       i64 m, i64 inner, i64 n, ErrFlag* err, int op) {
  GRID_STRIDE(t, outer * m * inner) {
    i64 o = t / (m * inner), i = t % inner;
    i64 j = ld_index(idx, idt, t);
    if (j < 0 || j >= n) {
      report_index(err, op, t, j, n);
      continue;
    }
    atomic_add_dt(dst, dt, (o * n + j) * inner + i, ld_d(src, dt, t));
  }
}

// sumsq_partial: block b sums x[lo, hi)² in double for the table's row b = (lo, hi).
extern "C" __global__ void sumsq_partial(double* part, const void* x, int dt, const i64* table, i64 nblocks) {
  for (i64 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    i64 lo = table[2 * b], hi = table[2 * b + 1];
    double acc = 0;
    for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      double v = ld_d(x, dt, j);
      acc += v * v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[b] = acc;
  }
}

// sumsq_finish: dst[r] = Σ part[first[r] .. first[r+1]), in order.
extern "C" __global__ void sumsq_finish(double* dst, const double* part, const i64* first, i64 nranges) {
  GRID_STRIDE(r, nranges) {
    double s = 0;
    for (i64 b = first[r]; b < first[r + 1]; b++) s += part[b];
    dst[r] = s;
  }
}

// colsum_partial: part[chunk, j] = Σ over the chunk's rows of a[r, j] (a is [rows, c]),
// the first stage of a deterministic column sum (bias gradients).
extern "C" __global__ void colsum_partial(float* part, const void* a, int dt, i64 rows, i64 c, i64 chunk) {
  i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  i64 r0 = (i64)blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0;
  for (i64 r = r0; r < r1; r++) s += ld_f(a, dt, r * c + j);
  part[(i64)blockIdx.y * c + j] = s;
}

// colsum_finish: dst[j] (+)= Σ_chunk part[chunk, j], chunks in order.
extern "C" __global__ void colsum_finish(void* dst, int dt, const float* part, i64 chunks, i64 c, int accumulate) {
  GRID_STRIDE(j, c) {
    float s = 0;
    for (i64 k = 0; k < chunks; k++) s += part[k * c + j];
    if (accumulate) s += ld_f(dst, dt, j);
    st_f(dst, dt, j, s);
  }
}
