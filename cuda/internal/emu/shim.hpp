// shim.hpp: just enough of CUDA C++ for the kernels of ../kernels to run on the host
// (see doc.go). A block's threads are fibers on the launching thread (runtime.hpp):
// each runs until it reaches __syncthreads, which yields, or returns (dropping out of
// the barrier, as on the GPU); once every thread still running is at the barrier, they
// all go on. Warp shuffles exchange values through a per-block buffer between two such
// barriers, which is correct because every shuffle in the kernels is executed by all
// threads of the block together. Blocks run one after another, so __shared__ variables
// can be statics. Not a general emulator: no thread may wait for another but at a
// barrier.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace std;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
};
// The running thread's coordinates, set by the scheduler before it resumes a thread.
// They are globals with external linkage, so the compiler reloads them after every call
// that may switch threads.
dim3 threadIdx, blockIdx, blockDim, gridDim;
unsigned emu_tid;  // the running thread's index in its block
unsigned long long emu_shfl[1024];

// emu_yield returns to the scheduler until every running thread of the block has
// reached it (runtime.hpp).
void emu_yield();

inline void __syncthreads() { emu_yield(); }

template <typename T> inline T __shfl_xor_sync(unsigned, T v, int o) {
  static_assert(sizeof(T) <= 8, "shuffle of a large type");
  std::memcpy(&emu_shfl[emu_tid], &v, sizeof(T));
  emu_yield();
  T r;
  std::memcpy(&r, &emu_shfl[emu_tid ^ (unsigned)o], sizeof(T));
  emu_yield();
  return r;
}

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return expf(x); }

// emu_cvt_rz is PTX's cvt.rz.f32.f64: round toward zero.
inline float emu_cvt_rz(double x) {
  float r = (float)x;
  if (std::isnan(x)) return r;
  if (std::fabs((double)r) > std::fabs(x)) r = std::nextafterf(r, 0.0f);
  return r;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned val) {
  std::atomic_ref<unsigned>(*p).compare_exchange_strong(cmp, val);
  return cmp;
}
inline int atomicCAS(int* p, int cmp, int val) {
  std::atomic_ref<int>(*p).compare_exchange_strong(cmp, val);
  return cmp;
}
