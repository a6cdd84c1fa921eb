// prelude.cu: types and helpers shared by every kernel module; the Go side prepends it
// to each module before compiling. Self-contained: no #include, because the NVRTC of
// Debian's libnvrtc11.2 ships no toolkit headers. Nothing here needs more than CUDA 11.8
// and sm_70 (double atomicAdd needs sm_60).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Element types: the numbers of tensor.DType (F64 = 1 ... I64 = 6).
#define DT_F64 1
#define DT_F32 2
#define DT_BF16 3
#define DT_F16 4
#define DT_I32 5
#define DT_I64 6

#define NEG_INF (__int_as_float(0xff800000))
#define POS_INF (__int_as_float(0x7f800000))

// ---- bfloat16 and binary16, by bit manipulation (round to nearest, ties to even) ----

__device__ __forceinline__ float bf16_to_f(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ u16 f_to_bf16(float f) {
  u32 b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return (u16)(b >> 16);
}

__device__ __forceinline__ float f16_to_f(u16 h) {
  u32 sign = ((u32)h & 0x8000u) << 16;
  u32 exp = ((u32)h >> 10) & 0x1fu;
  u32 man = (u32)h & 0x3ffu;
  if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
  if (exp == 0) {
    if (man == 0) return __uint_as_float(sign);
    float f = (float)man * 5.9604644775390625e-8f;  // man · 2^-24, exact
    return sign ? -f : f;
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ u16 f_to_f16(float f) {
  u32 b = __float_as_uint(f);
  u32 sign = (b >> 16) & 0x8000u;
  int exp = (int)((b >> 23) & 0xffu);
  u32 man = b & 0x7fffffu;
  if (exp == 0xff) return (u16)(sign | (man ? 0x7e00u : 0x7c00u));
  if (exp > 127 + 15) return (u16)(sign | 0x7c00u);
  if (exp >= 127 - 14) {
    u32 v = ((u32)(exp - 127 + 15) << 10) | (man >> 13);
    u32 rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;
    return (u16)(sign | v);
  }
  if (exp >= 127 - 25) {
    u32 m = man | 0x800000u;
    u32 shift = (u32)(126 - exp);
    u32 v = m >> shift;
    u32 rest = m & ((1u << shift) - 1u);
    u32 half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (v & 1u))) v++;
    return (u16)(sign | v);
  }
  return (u16)sign;
}

// round_to_odd narrows a double to float by truncation, setting the lowest bit when
// anything was lost; rounding that to bf16 or f16 then rounds correctly (one rounding).
__device__ __forceinline__ float round_to_odd(double x) {
  float r;
  asm("cvt.rz.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
  if (x != x || (double)r == x) return r;
  return __uint_as_float(__float_as_uint(r) | 1u);
}

// ---- loads and stores of any dtype, computing in float or double ----

__device__ __forceinline__ double ld_d(const void* p, int dt, i64 i) {
  switch (dt) {
    case DT_F64: return ((const double*)p)[i];
    case DT_F32: return (double)((const float*)p)[i];
    case DT_BF16: return (double)bf16_to_f(((const u16*)p)[i]);
    case DT_F16: return (double)f16_to_f(((const u16*)p)[i]);
    case DT_I32: return (double)((const int*)p)[i];
    default: return (double)((const i64*)p)[i];
  }
}

__device__ __forceinline__ float ld_f(const void* p, int dt, i64 i) {
  switch (dt) {
    case DT_F64: return (float)((const double*)p)[i];
    case DT_F32: return ((const float*)p)[i];
    case DT_BF16: return bf16_to_f(((const u16*)p)[i]);
    case DT_F16: return f16_to_f(((const u16*)p)[i]);
    case DT_I32: return (float)((const int*)p)[i];
    default: return (float)((const i64*)p)[i];
  }
}

__device__ __forceinline__ void st_d(void* p, int dt, i64 i, double v) {
  switch (dt) {
    case DT_F64: ((double*)p)[i] = v; break;
    case DT_F32: ((float*)p)[i] = (float)v; break;
    case DT_BF16: ((u16*)p)[i] = f_to_bf16(round_to_odd(v)); break;
    case DT_F16: ((u16*)p)[i] = f_to_f16(round_to_odd(v)); break;
    case DT_I32: ((int*)p)[i] = (int)v; break;
    default: ((i64*)p)[i] = (i64)v; break;
  }
}

__device__ __forceinline__ void st_f(void* p, int dt, i64 i, float v) {
  switch (dt) {
    case DT_F64: ((double*)p)[i] = (double)v; break;
    case DT_F32: ((float*)p)[i] = v; break;
    case DT_BF16: ((u16*)p)[i] = f_to_bf16(v); break;
    case DT_F16: ((u16*)p)[i] = f_to_f16(v); break;
    case DT_I32: ((int*)p)[i] = (int)v; break;
    default: ((i64*)p)[i] = (i64)v; break;
  }
}

// IO<C> selects the loads and stores for compute type C (float or double).
template <typename C> struct IO;
template <> struct IO<float> {
  static __device__ __forceinline__ float ld(const void* p, int dt, i64 i) { return ld_f(p, dt, i); }
  static __device__ __forceinline__ void st(void* p, int dt, i64 i, float v) { st_f(p, dt, i, v); }
};
template <> struct IO<double> {
  static __device__ __forceinline__ double ld(const void* p, int dt, i64 i) { return ld_d(p, dt, i); }
  static __device__ __forceinline__ void st(void* p, int dt, i64 i, double v) { st_d(p, dt, i, v); }
};

// Index integers (I32 or I64).
__device__ __forceinline__ i64 ld_index(const void* p, int dt, i64 i) {
  return dt == DT_I32 ? (i64)((const int*)p)[i] : ((const i64*)p)[i];
}

// ---- strided and broadcast indexing ----

// Idx describes up to three operands walked in the row-major order of a shape: element
// i's offset in operand k is Σ_d coord_d(i)·st[k][d]. The Go side merges dims first.
#define MAXD 8
struct Idx {
  i64 nd;
  i64 shape[MAXD];
  i64 st[3][MAXD];
};

__device__ __forceinline__ void idx_offsets(const Idx& d, i64 i, i64* o0, i64* o1, i64* o2) {
  i64 a = 0, b = 0, c = 0;
  for (int k = (int)d.nd - 1; k >= 0; k--) {
    i64 s = d.shape[k];
    i64 q = i / s;
    i64 r = i - q * s;
    i = q;
    a += r * d.st[0][k];
    b += r * d.st[1][k];
    c += r * d.st[2][k];
  }
  *o0 = a;
  *o1 = b;
  *o2 = c;
}

#define GRID_STRIDE(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// ---- Philox-4x32-10 and the layout-independent distributions of tensor/rng.go ----

__device__ __forceinline__ void philox(u32 c[4], u32 k0, u32 k1) {
  for (int r = 0; r < 10; r++) {
    u64 p0 = (u64)0xD2511F53u * c[0];
    u64 p1 = (u64)0xCD9E8D57u * c[2];
    u32 n0 = (u32)(p1 >> 32) ^ c[1] ^ k0;
    u32 n1 = (u32)p1;
    u32 n2 = (u32)(p0 >> 32) ^ c[3] ^ k1;
    u32 n3 = (u32)p0;
    c[0] = n0; c[1] = n1; c[2] = n2; c[3] = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

__device__ __forceinline__ double fraction53(u32 w0, u32 w1) {
  return (double)((((u64)w0) << 21) | (u64)(w1 >> 11)) * (1.0 / 9007199254740992.0);
}

// uniform_at is element i's fraction in [0, 1): words 2(i mod 2), 2(i mod 2)+1 of block i/2.
__device__ __forceinline__ double uniform_at(u64 i, u32 k0, u32 k1) {
  u64 blk = i >> 1;
  u32 c[4] = {(u32)blk, (u32)(blk >> 32), 0u, 0u};
  philox(c, k0, k1);
  return (i & 1) ? fraction53(c[2], c[3]) : fraction53(c[0], c[1]);
}

// normal_at is element i's standard normal (Box-Muller on all of block i).
__device__ __forceinline__ double normal_at(u64 i, u32 k0, u32 k1) {
  u32 c[4] = {(u32)i, (u32)(i >> 32), 0u, 0u};
  philox(c, k0, k1);
  double u1 = fraction53(c[0], c[1]), u2 = fraction53(c[2], c[3]);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

// Distributions (tensor.Dist).
#define DIST_UNIFORM 1
#define DIST_NORMAL 2
#define DIST_BERNOULLI 3
#define DIST_DROPOUT 4

__device__ __forceinline__ double sample_at(u64 i, u32 k0, u32 k1, int dist, double a, double b) {
  switch (dist) {
    case DIST_UNIFORM: return a + (b - a) * uniform_at(i, k0, k1);
    case DIST_NORMAL: return a + b * normal_at(i, k0, k1);
    case DIST_BERNOULLI: return uniform_at(i, k0, k1) < a ? 1.0 : 0.0;
    default: return uniform_at(i, k0, k1) < a ? 0.0 : 1.0 / (1.0 - a);
  }
}

// ---- reductions within a warp and a block ----

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// nan_max is max with NaN winning, as PyTorch's max does.
template <typename T> __device__ __forceinline__ T nan_max(T a, T b) { return (b > a || b != b) ? b : a; }

template <typename T> __device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// block_sum and block_max return the reduction over the block to every thread. Every
// thread of the block must call them (blockDim.x a multiple of 32, at most 1024). Kernels
// launched with up to 1024 threads per block (one block per row) are declared
// __launch_bounds__(1024), which keeps them within the registers such a block may use.
template <typename T> __device__ T block_sum(T v) {
  __shared__ T part[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[w] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  v = lane < nw ? part[lane] : (T)0;
  v = warp_sum(v);
  __syncthreads();  // part is reused by the next call
  return v;
}

template <typename T> __device__ T block_max(T v) {
  __shared__ T part[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) part[w] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  v = lane < nw ? part[lane] : (T)NEG_INF;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// ---- atomics for every float dtype ----

__device__ __forceinline__ void atomic_add_half(u16* addr, float v, bool bf) {
  u32* base = (u32*)((u64)addr & ~(u64)3);
  bool hi = ((u64)addr & 2) != 0;
  u32 old = *base, assumed;
  do {
    assumed = old;
    u16 h = hi ? (u16)(assumed >> 16) : (u16)(assumed & 0xffffu);
    float f = (bf ? bf16_to_f(h) : f16_to_f(h)) + v;
    u32 n = bf ? f_to_bf16(f) : f_to_f16(f);
    u32 w = hi ? ((assumed & 0xffffu) | (n << 16)) : ((assumed & 0xffff0000u) | n);
    old = atomicCAS(base, assumed, w);
  } while (assumed != old);
}

__device__ __forceinline__ void atomic_add_dt(void* p, int dt, i64 i, double v) {
  switch (dt) {
    case DT_F64: atomicAdd((double*)p + i, v); break;
    case DT_F32: atomicAdd((float*)p + i, (float)v); break;
    case DT_BF16: atomic_add_half((u16*)p + i, (float)v, true); break;
    case DT_F16: atomic_add_half((u16*)p + i, (float)v, false); break;
    case DT_I32: atomicAdd((int*)p + i, (int)v); break;
    default: atomicAdd((u64*)p + i, (u64)(i64)v); break;
  }
}

// ---- errors found on the device ----

// ErrFlag records the first bad index a kernel met (the Go side checks it when it next
// waits for the device, and panics with the op, position and value).
struct ErrFlag {
  int code;  // 0: none; otherwise the kernel's error code
  int pad;
  i64 pos;
  i64 value;
  i64 limit;
};

#define ERR_INDEX 1

__device__ __forceinline__ void report_index(ErrFlag* e, int code, i64 pos, i64 value, i64 limit) {
  if (e != 0 && atomicCAS(&e->code, 0, code) == 0) {
    e->pos = pos;
    e->value = value;
    e->limit = limit;
  }
}
