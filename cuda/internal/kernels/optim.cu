// optim.cu: multi-tensor Adam/AdamW and SGD steps over flat buffers. One launch updates
// every segment (a parameter or its shard, with its own learning rate and weight decay):
// the segment table holds, per segment, its element offset, length, lr and weight decay,
// and prefix[s] = Σ_{s'<s} length; thread t finds its segment by binary search. The
// parameter, moments and momentum are F32 (the fp32 master weights) or F64; gradients
// have any float dtype; the optional model copy receives the parameter rounded to its
// dtype (bf16 weights for the forward).

struct Seg {
  i64 off, n;
  double lr, wd;
};

__device__ __forceinline__ int seg_of(const i64* prefix, int nsegs, i64 t) {
  int lo = 0, hi = nsegs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// adam: PyTorch's Adam (L2 decay added to the gradient) or AdamW (decoupled), with the
// CPU backend's order of operations in the parameter's precision C.
template <typename C>
__device__ void adam_impl(C* p, const void* grad, int gdt, C* m, C* v, void* model, int mdt, const Seg* segs,
                          const i64* prefix, int nsegs, i64 total, double beta1, double beta2, double eps, double bc1,
                          double bc2, double gscale, int decoupled) {
  GRID_STRIDE(t, total) {
    int s = seg_of(prefix, nsegs, t);
    Seg sg = segs[s];
    i64 i = sg.off + (t - prefix[s]);
    C scale = (C)gscale, b1 = (C)beta1, c1 = (C)(1 - beta1), b2 = (C)beta2, c2 = (C)(1 - beta2);
    C step = (C)(sg.lr / bc1), inv = (C)(1 / sqrt(bc2)), e = (C)eps;
    C decay = decoupled ? (C)(1 - sg.lr * sg.wd) : (C)1, l2 = decoupled ? (C)0 : (C)sg.wd;
    C pi = p[i];
    C g = IO<C>::ld(grad, gdt, i) * scale + l2 * pi;
    C mi = b1 * m[i] + c1 * g;
    C vi = b2 * v[i] + c2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    C denom = sqrt(vi) * inv + e;
    pi = pi * decay - step * (mi / denom);
    p[i] = pi;
    if (model) IO<C>::st(model, mdt, i, pi);
  }
}

extern "C" __global__ void adam_f(float* p, const void* grad, int gdt, float* m, float* v, void* model, int mdt,
                                  const Seg* segs, const i64* prefix, int nsegs, i64 total, double beta1,
                                  double beta2, double eps, double bc1, double bc2, double gscale, int decoupled) {
  adam_impl<float>(p, grad, gdt, m, v, model, mdt, segs, prefix, nsegs, total, beta1, beta2, eps, bc1, bc2, gscale,
                   decoupled);
}
extern "C" __global__ void adam_d(double* p, const void* grad, int gdt, double* m, double* v, void* model, int mdt,
                                  const Seg* segs, const i64* prefix, int nsegs, i64 total, double beta1,
                                  double beta2, double eps, double bc1, double bc2, double gscale, int decoupled) {
  adam_impl<double>(p, grad, gdt, m, v, model, mdt, segs, prefix, nsegs, total, beta1, beta2, eps, bc1, bc2, gscale,
                    decoupled);
}

// sgd: PyTorch's SGD with momentum, dampening and Nesterov; buf may be null without
// momentum.
template <typename C>
__device__ void sgd_impl(C* p, const void* grad, int gdt, C* buf, void* model, int mdt, const Seg* segs,
                         const i64* prefix, int nsegs, i64 total, double momentum, double dampening, int nesterov,
                         int first, double gscale) {
  GRID_STRIDE(t, total) {
    int s = seg_of(prefix, nsegs, t);
    Seg sg = segs[s];
    i64 i = sg.off + (t - prefix[s]);
    C mu = (C)momentum, damp = (C)(1 - dampening), scale = (C)gscale, lr = (C)sg.lr, wd = (C)sg.wd;
    C pi = p[i];
    C g = IO<C>::ld(grad, gdt, i) * scale + wd * pi;
    C d = g;
    if (buf) {
      C bi = first ? g : mu * buf[i] + damp * g;
      buf[i] = bi;
      d = nesterov ? g + mu * bi : bi;
    }
    pi -= lr * d;
    p[i] = pi;
    if (model) IO<C>::st(model, mdt, i, pi);
  }
}

extern "C" __global__ void sgd_f(float* p, const void* grad, int gdt, float* buf, void* model, int mdt,
                                 const Seg* segs, const i64* prefix, int nsegs, i64 total, double momentum,
                                 double dampening, int nesterov, int first, double gscale) {
  sgd_impl<float>(p, grad, gdt, buf, model, mdt, segs, prefix, nsegs, total, momentum, dampening, nesterov, first,
                  gscale);
}
extern "C" __global__ void sgd_d(double* p, const void* grad, int gdt, double* buf, void* model, int mdt,
                                 const Seg* segs, const i64* prefix, int nsegs, i64 total, double momentum,
                                 double dampening, int nesterov, int first, double gscale) {
  sgd_impl<double>(p, grad, gdt, buf, model, mdt, segs, prefix, nsegs, total, momentum, dampening, nesterov, first,
                   gscale);
}
