// runtime.hpp: the emulator's launch table and entry points, appended after the kernels.

template <typename... A, size_t... I>
void emu_call_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*(std::remove_cv_t<std::remove_reference_t<A>>*)p[I]...);
}
template <typename... A> void emu_call(void (*f)(A...), void** p) {
  emu_call_impl(f, p, std::index_sequence_for<A...>{});
}

static std::map<std::string, std::function<void(void**)>>& emu_registry() {
  static std::map<std::string, std::function<void(void**)>> m;
  return m;
}

// A pool of 1024 persistent worker threads, one per possible thread of a block: starting
// threads per block is what makes a naive emulator slow.
struct EmuJob {
  std::function<void(void**)>* fn;
  void** params;
  dim3 block;
  std::barrier<>* bar;
  std::latch* fin;
};
static EmuJob emu_job;
static std::vector<std::binary_semaphore*>& emu_pool() {
  static std::vector<std::binary_semaphore*> sems = [] {
    std::vector<std::binary_semaphore*> s;
    for (unsigned i = 0; i < 1024; i++) {
      auto* sem = new std::binary_semaphore(0);
      s.push_back(sem);
      std::thread([sem, i] {
        for (;;) {
          sem->acquire();
          EmuJob j = emu_job;
          threadIdx = {i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y)};
          blockIdx = j.block;
          emu_bar = j.bar;
          emu_tid = i;
          (*j.fn)(j.params);
          j.bar->arrive_and_drop();
          j.fin->count_down();
        }
      }).detach();
    }
    return s;
  }();
  return sems;
}

// emu_launch runs every block of the grid in turn, each with its threads concurrently.
extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** params) {
  auto it = emu_registry().find(name);
  if (it == emu_registry().end()) return -1;
  auto& pool = emu_pool();
  gridDim = {gx, gy, gz};
  blockDim = {bx, by, bz};
  unsigned nt = bx * by * bz;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        std::barrier<> bar((ptrdiff_t)nt);
        std::latch fin((ptrdiff_t)nt);
        emu_job = {&it->second, params, {x, y, z}, &bar, &fin};
        for (unsigned t = 0; t < nt; t++) pool[t]->release();
        fin.wait();
      }
  return 0;
}

extern "C" void* emu_malloc(unsigned long long n) { return std::aligned_alloc(256, (n + 255) / 256 * 256); }
extern "C" void emu_free(void* p) { std::free(p); }
extern "C" void emu_htod(void* dst, const void* src, unsigned long long n) { std::memcpy(dst, src, n); }
extern "C" void emu_dtoh(void* dst, const void* src, unsigned long long n) { std::memcpy(dst, src, n); }
extern "C" void emu_dtod(void* dst, const void* src, unsigned long long n) { std::memmove(dst, src, n); }
extern "C" void emu_memset(void* p, int size, unsigned v, unsigned long long n) {
  for (unsigned long long i = 0; i < n; i++) {
    if (size == 1) ((u8*)p)[i] = (u8)v;
    else if (size == 2) ((u16*)p)[i] = (u16)v;
    else ((u32*)p)[i] = v;
  }
}

struct EmuGemm {
  i64 type, m, n, k, transA, transB, lda, ldb, ldd, batch;
  i64 strideA, strideB, strideD, epilogue, accumulate, auxLD;
  double alpha;
  void *a, *b, *d, *bias, *aux;
};

static int emu_dt(i64 t) {  // cudaDataType to tensor.DType
  switch (t) {
    case 0: return DT_F32;
    case 1: return DT_F64;
    case 2: return DT_F16;
    case 14: return DT_BF16;
  }
  return -1;
}

static double emu_gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double emu_gelu_grad(double x) {
  double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// emu_gemm: D = epilogue(α·op(A)·op(B) (+ D) (+ bias)) in row-major terms, in double.
extern "C" int emu_gemm(const EmuGemm* g) {
  int dt = emu_dt(g->type);
  i64 e = g->epilogue;
  bool bias = e == 4 || e == 36 || e == 164, gelu = e == 32 || e == 36 || e == 160 || e == 164;
  bool aux = e == 160 || e == 164, dgelu = e == 192 || e == 208;
  if (dt < 0 || !(e == 1 || bias || gelu || dgelu || e == 256 || e == 512)) return -1;
  for (i64 bi = 0; bi < g->batch; bi++) {
    auto A = [&](i64 i, i64 k) {
      return ld_d(g->a, dt, bi * g->strideA + (g->transA ? k * g->lda + i : i * g->lda + k));
    };
    auto B = [&](i64 k, i64 j) {
      return ld_d(g->b, dt, bi * g->strideB + (g->transB ? j * g->ldb + k : k * g->ldb + j));
    };
    for (i64 i = 0; i < g->m; i++)
      for (i64 j = 0; j < g->n; j++) {
        double s = 0;
        for (i64 k = 0; k < g->k; k++) s += A(i, k) * B(k, j);
        i64 at = bi * g->strideD + i * g->ldd + j;
        double v = g->alpha * s;
        if (g->accumulate) v += ld_d(g->d, dt, at);
        if (bias) v += ld_d(g->bias, dt, j);
        i64 ax = bi * g->auxLD * g->m + i * g->auxLD + j;
        if (aux) st_d(g->aux, dt, ax, v);
        if (gelu) v = emu_gelu(v);
        if (dgelu) v *= emu_gelu_grad(ld_d(g->aux, dt, ax));
        st_d(g->d, dt, at, v);
      }
    if (e == 208)
      for (i64 j = 0; j < g->n; j++) {
        double s = 0;
        for (i64 i = 0; i < g->m; i++) s += ld_d(g->d, dt, bi * g->strideD + i * g->ldd + j);
        st_d(g->bias, dt, j, s);
      }
    if (e == 256)
      for (i64 j = 0; j < g->n; j++) {
        double s = 0;
        for (i64 k = 0; k < g->k; k++) s += B(k, j);
        st_d(g->bias, dt, j, s);
      }
    if (e == 512)
      for (i64 i = 0; i < g->m; i++) {
        double s = 0;
        for (i64 k = 0; k < g->k; k++) s += A(i, k);
        st_d(g->bias, dt, i, s);
      }
  }
  return 0;
}
