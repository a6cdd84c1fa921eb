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

// Fibers: a block's threads run on the launching thread, each on its own stack, and
// switch only where they yield (emu_yield: __syncthreads and shuffles) or return. The
// scheduler resumes every thread still running in turn, each running to its next yield:
// after such a pass all of them have reached the same barrier (or returned), which is
// __syncthreads's meaning. Switching costs a few instructions, not an OS thread switch.
static const size_t emu_stack_bytes = 256 << 10;  // kernels keep small arrays on the stack

struct EmuFiber {
  void* sp;   // saved stack pointer while switched out
  char* stack;
  bool done;
};
static EmuFiber emu_fibers[1024];
static void* emu_sched_sp;  // the scheduler's, while a thread runs
static unsigned emu_cur;    // the running thread
static std::function<void(void**)>* emu_fn;
static void** emu_params;

#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
// emu_swap saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, and resumes the context whose stack pointer is to.
extern "C" void emu_swap(void** save, void* to);
asm(R"(
.text
.globl emu_swap
.type emu_swap,@function
emu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_swap, .-emu_swap
)");

static void emu_fiber_main();

// emu_fiber_start prepares fiber f to enter emu_fiber_main when first resumed: below the
// stack's top, the entry as a return address (aligned as a call would leave it) and
// six zero registers for emu_swap to pop.
static void emu_fiber_start(EmuFiber& f) {
  auto* sp = (uint64_t*)(f.stack + emu_stack_bytes);
  *--sp = 0;
  *--sp = (uint64_t)(void*)emu_fiber_main;
  for (int i = 0; i < 6; i++) *--sp = 0;
  f.sp = sp;
}
static void emu_to_fiber(EmuFiber& f) { emu_swap(&emu_sched_sp, f.sp); }
static void emu_to_scheduler(EmuFiber& f) { emu_swap(&f.sp, emu_sched_sp); }
#else
// Elsewhere, ucontext (slower: it saves the signal mask with a system call).
#include <ucontext.h>
static ucontext_t emu_sched_ctx, emu_ctx[1024];
static void emu_fiber_main();
static void emu_fiber_start(EmuFiber& f) {
  auto& c = emu_ctx[&f - emu_fibers];
  getcontext(&c);
  c.uc_stack.ss_sp = f.stack;
  c.uc_stack.ss_size = emu_stack_bytes;
  c.uc_link = nullptr;
  makecontext(&c, emu_fiber_main, 0);
}
static void emu_to_fiber(EmuFiber& f) { swapcontext(&emu_sched_ctx, &emu_ctx[&f - emu_fibers]); }
static void emu_to_scheduler(EmuFiber& f) { swapcontext(&emu_ctx[&f - emu_fibers], &emu_sched_ctx); }
#endif

__attribute__((noinline)) void emu_yield() { emu_to_scheduler(emu_fibers[emu_cur]); }

// emu_fiber_main runs the kernel as the current thread and never returns: a finished
// thread switches to the scheduler for good (its stack is reused by the next block).
static void emu_fiber_main() {
  (*emu_fn)(emu_params);
  emu_fibers[emu_cur].done = true;
  emu_to_scheduler(emu_fibers[emu_cur]);
  __builtin_trap();
}

// emu_run_block runs the nt threads of the current block to completion.
static void emu_run_block(unsigned nt) {
  for (unsigned t = 0; t < nt; t++) {
    EmuFiber& f = emu_fibers[t];
    if (!f.stack) f.stack = (char*)std::aligned_alloc(64, emu_stack_bytes);
    f.done = false;
    emu_fiber_start(f);
  }
  for (unsigned live = nt; live > 0;) {
    for (unsigned t = 0; t < nt; t++) {
      EmuFiber& f = emu_fibers[t];
      if (f.done) continue;
      threadIdx = {t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
      emu_tid = emu_cur = t;
      emu_to_fiber(f);
      if (f.done) live--;
    }
  }
}

// emu_launch runs every block of the grid in turn (the caller holds the process's
// launch lock).
extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** params) {
  auto it = emu_registry().find(name);
  if (it == emu_registry().end()) return -1;
  unsigned nt = bx * by * bz;
  if (nt == 0 || nt > 1024) return -2;
  gridDim = {gx, gy, gz};
  blockDim = {bx, by, bz};
  emu_fn = &it->second;
  emu_params = params;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        blockIdx = {x, y, z};
        emu_run_block(nt);
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
  i64 M = g->m, N = g->n, K = g->k;
  std::vector<double> a(M * K), b(K * N), acc(N);
  for (i64 bi = 0; bi < g->batch; bi++) {
    auto A = [&](i64 i, i64 k) {
      return ld_d(g->a, dt, bi * g->strideA + (g->transA ? k * g->lda + i : i * g->lda + k));
    };
    auto B = [&](i64 k, i64 j) {
      return ld_d(g->b, dt, bi * g->strideB + (g->transB ? j * g->ldb + k : k * g->ldb + j));
    };
    // op(A) and op(B) in double, row-major, then rows of D by k-outer products: each
    // element still sums its products in the order k = 0, 1, ...
    for (i64 i = 0; i < M; i++)
      for (i64 k = 0; k < K; k++) a[i * K + k] = A(i, k);
    for (i64 k = 0; k < K; k++)
      for (i64 j = 0; j < N; j++) b[k * N + j] = B(k, j);
    for (i64 i = 0; i < M; i++) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (i64 k = 0; k < K; k++) {
        double av = a[i * K + k];
        const double* br = &b[k * N];
        for (i64 j = 0; j < N; j++) acc[j] += av * br[j];
      }
      for (i64 j = 0; j < N; j++) {
        double s = acc[j];
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
        for (i64 k = 0; k < K; k++) s += b[k * N + j];
        st_d(g->bias, dt, j, s);
      }
    if (e == 512)
      for (i64 i = 0; i < g->m; i++) {
        double s = 0;
        for (i64 k = 0; k < K; k++) s += a[i * K + k];
        st_d(g->bias, dt, i, s);
      }
  }
  return 0;
}
