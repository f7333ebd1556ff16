// Dynamic per-token quantization: one scale per row, symmetric (max |x|) or asymmetric INT8 (min,
// max and a zero point); and the row machinery it shares with rms_norm_quant.cuh.
//
// NOTES: memory-bound (3 to 9 bytes per element), so the row must be read from DRAM once. One
// block owns a row; each thread holds VPT chunks (8 consecutive elements) of it in registers as
// raw input bits (chunk_col says which), so a warp's loads are 512 contiguous bytes and the lanes
// of a warp hold consecutive chunks (what the group shuffles of rms_norm_quant rely on). Pass 1
// reduces the row's range over the block, pass 2 quantizes from the registers. A row longer than
// T * VPT chunks (T = blockDim.x) is processed in tiles of that size and read twice; the second
// read mostly hits L2. Bandwidth comes from bytes in flight: the rows resident on an SM, set by
// registers per row and by the launch shape (row_config).
#pragma once

#include <type_traits>

#include "cuda/quant/vec.cuh"
#include "cuda/ptx/griddep.cuh"

constexpr int kRowThreadsMax = 512;  // launch bound of the row kernels: at most 128 registers
constexpr int kRowCacheBytes = 128;  // input bytes a thread keeps in registers per tensor

// Chunks per thread at most, for elements of `bytes` bytes.
__host__ __device__ constexpr int row_vpt_max(int bytes) { return kRowCacheBytes / (8 * bytes); }

// ---- a row in chunks of 8 elements -----------------------------------------------------------

// How a thread reaches its chunks: 16-byte vectors (row starts aligned, K a multiple of 8, so a
// chunk is wholly inside or wholly past the row), or element by element (any pitch and K).
enum class RowAccess { kScalar, kVec16 };

// Eight consecutive elements as raw bits: one 16-byte vector for 16-bit types, two for fp32.
template <typename T>
struct Chunk {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  uint4 raw[sizeof(T) / 2];
  __device__ __forceinline__ T &operator[](int j) { return reinterpret_cast<T *>(raw)[j]; }
  __device__ __forceinline__ float f32(int j) const { return to_f32(reinterpret_cast<const T *>(raw)[j]); }
};

// Column of the first element of chunk slot i of tile t for this thread: warp w of a tile covers
// VPT runs of 32 consecutive chunks, lane l chunk l of each run. Consecutive lanes hold
// consecutive chunks (a warp's load is 512 contiguous bytes; a group is G / 8 adjacent lanes) and
// a thread's slots are a constant 256 columns apart, so their addresses are one base register
// plus immediate offsets. Columns within a row are 32-bit (the launchers refuse longer rows).
template <int VPT>
__device__ __forceinline__ int chunk_col(int t, int i) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  return ((t * warps + warp) * VPT + i) * 256 + lane * 8;
}

// Columns [c, c + 8) of a row; columns at or past `cols` read as 0.
template <RowAccess ACC, typename T>
__device__ __forceinline__ Chunk<T> load_chunk(const T *row, int c, int cols) {
  Chunk<T> ch;
#pragma unroll
  for (int k = 0; k < sizeof(T) / 2; k++) ch.raw[k] = make_uint4(0, 0, 0, 0);
  if (ACC == RowAccess::kVec16) {
    if (c < cols) {
#pragma unroll
      for (int k = 0; k < sizeof(T) / 2; k++) ch.raw[k] = reinterpret_cast<const uint4 *>(row + c)[k];
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c + j < cols) ch[j] = row[c + j];
  }
  return ch;
}

template <RowAccess ACC, typename T>
__device__ __forceinline__ void store_chunk(T *row, int c, int cols, Chunk<T> ch) {
  if (ACC == RowAccess::kVec16) {
    if (c < cols) {
#pragma unroll
      for (int k = 0; k < sizeof(T) / 2; k++) reinterpret_cast<uint4 *>(row + c)[k] = ch.raw[k];
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c + j < cols) row[c + j] = ch[j];
  }
}

// Encodes eight values (already multiplied by 1/scale) into columns [c, c + 8) of a row of q
// (vectors: one 8-byte store).
template <RowAccess ACC, typename Tout>
__device__ __forceinline__ void store_q_chunk(Tout *row, int c, int cols, const float (&v)[8]) {
  if (ACC == RowAccess::kVec16) {
    if (c < cols) store8(row + c, v);
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c + j < cols) reinterpret_cast<uint8_t *>(row)[c + j] = encode(Tout{}, v[j]);
  }
}

// Eight int32 values saturated to int8 into columns [c, c + 8) of a row (vectors: two packing
// instructions and one 8-byte store).
template <RowAccess ACC>
__device__ __forceinline__ void store_s8_chunk(uint8_t *row, int c, int cols, const int32_t (&v)[8]) {
  if (ACC == RowAccess::kVec16) {
    if (c < cols)
      *reinterpret_cast<uint2 *>(row + c) =
          make_uint2(cvt_pack_sat_s8x4(v[0], v[1], v[2], v[3]), cvt_pack_sat_s8x4(v[4], v[5], v[6], v[7]));
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (c + j < cols) row[c + j] = static_cast<uint8_t>(max(-128, min(127, v[j])));
  }
}


// NaN-propagating running min and max of a row's values, or of their magnitudes. For 16-bit
// inputs the whole chunks go through pairs (__hmin2_nan / __hmax2_nan, exact on the values),
// about one instruction per element; single values and fp32 through qf_nan_min / qf_nan_max.
// The result equals folding qf_nan_min / qf_nan_max over the widened values up to the payload
// of a NaN and the sign of a zero, neither of which changes a scale, zero point or code.
template <typename T>
struct RowRange {
  static constexpr bool kPairs = sizeof(T) == 2;
  using P = typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type;
  float lo = qf_f32_from_bits(QF_F32_INF), hi = -qf_f32_from_bits(QF_F32_INF);
  P plo, phi;

  __device__ __forceinline__ RowRange() {
    const uint32_t inf = std::is_same<T, __half>::value ? 0x7c007c00u : 0x7f807f80u;  // +Inf, +Inf
    plo = *reinterpret_cast<const P *>(&inf);
    const uint32_t ninf = inf | 0x80008000u;
    phi = *reinterpret_cast<const P *>(&ninf);
  }
  __device__ __forceinline__ void add(float v) { lo = qf_nan_min(lo, v), hi = qf_nan_max(hi, v); }
  template <bool kAbs>
  __device__ __forceinline__ void add_chunk(const Chunk<T> &ch) {
    if constexpr (kPairs) {
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const P v = kAbs ? __habs2(reinterpret_cast<const P *>(ch.raw)[k]) : reinterpret_cast<const P *>(ch.raw)[k];
        plo = __hmin2_nan(plo, v), phi = __hmax2_nan(phi, v);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) add(kAbs ? qf_absf(ch.f32(j)) : ch.f32(j));
    }
  }
  // Merges the pairs into lo and hi: the range of everything this thread added.
  __device__ __forceinline__ void finish() {
    if constexpr (kPairs) {
      lo = qf_nan_min(lo, qf_nan_min(to_f32(plo.x), to_f32(plo.y)));
      hi = qf_nan_max(hi, qf_nan_max(to_f32(phi.x), to_f32(phi.y)));
    }
  }
};

template <typename Tout>
__device__ __forceinline__ float qmax_of() {
  return qf_qmax(std::is_same<Tout, int8_out_t>::value, std::is_same<Tout, e4m3fnuz_t>::value);
}

// ---- block reductions ------------------------------------------------------------------------

struct NanMax {
  __device__ float operator()(float a, float b) const { return qf_nan_max(a, b); }
};
struct NanMin {
  __device__ float operator()(float a, float b) const { return qf_nan_min(a, b); }
};
struct Sum {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Reduces v over the block with the commutative `op`; every thread gets the same result (the
// warps' partials are combined in one order by all threads). `slots` holds one partial per warp:
// give each reduction of a row its own array, and synchronize before a block reuses one.
template <typename T, typename Op>
__device__ __forceinline__ T block_allreduce(T v, Op op, T *slots) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, d));
  const int tid = threadIdx.x + blockDim.x * threadIdx.y, warps = blockDim.x * blockDim.y / 32;
  if (tid % 32 == 0) slots[tid / 32] = v;
  __syncthreads();
  T r = slots[0];
  for (int w = 1; w < warps; w++) r = op(r, slots[w]);
  return r;
}

// ---- launch shape ------------------------------------------------------------------------------

constexpr int64_t kRowColsMax = int64_t(1) << 30;  // columns are 32-bit inside the row kernels

// Threads per row block (a multiple of 32), chunks per thread and the access path.
struct RowConfig {
  int threads, vpt;
  RowAccess access;
};

// Vectors, with rows enough to fill the chip: 4 chunks per thread (64 bytes of a 16-bit tensor),
// 8 when the row would need more than kRowThreadsMax threads, fewer when it would not fill a
// warp. Measured on H200 (rms_norm_quant, bf16 + residual): K = 7168 with 4 x 224 threads runs
// at 87-93% of the copy floor against 63-80% with 8 x 128; K = 2048 with 4 x 64 at 79-86%
// against 54-56% with 1 x 256. With few rows (decode), 256 threads: the row's serial work is
// spread over more threads. The scalar path is a fallback: one chunk per thread.
static inline RowConfig row_config(int64_t cols, int elem_bytes, bool vec, int64_t rows, int sm_count) {
  const int64_t chunks = (cols + 7) / 8, vpt_max = vec ? row_vpt_max(elem_bytes) : 1;
  auto threads_for = [&](int64_t vpt) { return (chunks + 32 * vpt - 1) / (32 * vpt) * 32; };
  int64_t vpt = 1;
  if (rows >= 4 * static_cast<int64_t>(sm_count)) {
    vpt = vpt_max < 4 ? vpt_max : 4;
    while (vpt > 1 && chunks < 32 * vpt) vpt /= 2;
    while (vpt < vpt_max && threads_for(vpt) > kRowThreadsMax) vpt *= 2;
  } else {
    while (vpt < vpt_max && threads_for(vpt) > 256) vpt *= 2;
  }
  const int64_t threads = threads_for(vpt) < kRowThreadsMax ? threads_for(vpt) : kRowThreadsMax;
  return {static_cast<int>(threads), static_cast<int>(vpt), vec ? RowAccess::kVec16 : RowAccess::kScalar};
}

// The row kernels' instantiation for a configuration, numbered 0 .. kRowVariants - 1: the scalar
// path, then 1, 2, 4 and the most chunks per thread (per-kernel flags, e.g. shared-memory opt-in).
constexpr int kRowVariants = 5;
static inline int row_variant(const RowConfig &cfg) {
  return cfg.access == RowAccess::kScalar ? 0 : cfg.vpt == 1 ? 1 : cfg.vpt == 2 ? 2 : cfg.vpt == 4 ? 3 : 4;
}

// One block per row; more rows than a grid holds are looped over.
static inline unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 0x7fffffff ? rows : 0x7fffffff); }

// ---- the per-token kernel ----------------------------------------------------------------------

enum class ZeroPoint { kNone, kPerToken };

struct TokenQuantParams {
  const void *x;
  void *q;
  int64_t x_ld, q_ld, rows;
  int cols;
  float *scales;
  int32_t *azp;       // ZeroPoint::kPerToken only
  float scale_min;
  const float *ub;    // NULL: no upper bound
};

// kPdl (qf_ctx_set_pdl): launched as a programmatic dependent, an instantiation of its own: it waits
// for the kernel before it (a GEMM writing x) before touching memory and lets the GEMM after it
// start at once.
template <typename Tin, typename Tout, ZeroPoint ZP, RowAccess ACC, int VPT, bool kPdl = false>
__global__ void __launch_bounds__(kRowThreadsMax) token_quant_kernel(TokenQuantParams p) {
  if constexpr (kPdl) {
    griddep_wait();
    griddep_launch_dependents();
  }
  static_assert(ZP == ZeroPoint::kNone || std::is_same<Tout, int8_out_t>::value, "zero points are INT8 only");
  static_assert(VPT >= 1 && VPT <= row_vpt_max(sizeof(Tin)), "chunks per thread");
  __shared__ float slots_a[32], slots_b[32];
  const int tile_chunks = blockDim.x * VPT;
  const int tiles = ((p.cols + 7) / 8 + tile_chunks - 1) / tile_chunks;
  const float ub = p.ub ? *p.ub : 0.0f;

  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const Tin *xr = static_cast<const Tin *>(p.x) + r * p.x_ld;
    Tout *qr = static_cast<Tout *>(p.q) + r * p.q_ld;
    Chunk<Tin> x[VPT];
    auto load_x = [&](int t) {
#pragma unroll
      for (int i = 0; i < VPT; i++) x[i] = load_chunk<ACC>(xr, chunk_col<VPT>(t, i), p.cols);
    };

    // Pass 1: max |x| (symmetric) or min and max (asymmetric) of the row.
    RowRange<Tin> range;
    for (int t = 0; t < tiles; t++) {
      load_x(t);
#pragma unroll
      for (int i = 0; i < VPT; i++) {
        const int c = chunk_col<VPT>(t, i);
        if (ZP == ZeroPoint::kNone) {
          range.template add_chunk<true>(x[i]);  // columns past the row read as 0: no effect
        } else if (ACC == RowAccess::kVec16) {
          if (c < p.cols) range.template add_chunk<false>(x[i]);
        } else {
#pragma unroll
          for (int j = 0; j < 8; j++)
            if (c + j < p.cols) range.add(x[i].f32(j));
        }
      }
    }
    range.finish();
    float amax = range.hi, lo = range.lo, hi = range.hi;

    // The scale (and zero point) of the row.
    float s;
    int32_t zp = 0;
    if (ZP == ZeroPoint::kNone) {
      amax = block_allreduce(amax, NanMax{}, slots_a);
      s = qf_group_scale(amax, qmax_of<Tout>(), p.ub != nullptr, ub, p.scale_min, 0);
    } else {
      lo = block_allreduce(lo, NanMin{}, slots_a);
      hi = block_allreduce(hi, NanMax{}, slots_b);
      const bool finite = qf_absf(lo) <= QF_F32_MAX && qf_absf(hi) <= QF_F32_MAX;
      s = finite ? qf_nan_max((hi - lo) / 255.0f, p.scale_min) : qf_qnan();
      // A NaN scale gives inv NaN, which rounds to 0 here and for every q below.
      zp = max(-128, min(127, qf_rne_i32(-128.0f - QF_MUL_RN(lo, qf_inv_scale(s)))));
    }
    const float inv = qf_inv_scale(s);
    if (threadIdx.x == 0) {
      p.scales[r] = s;
      if (ZP == ZeroPoint::kPerToken) p.azp[r] = zp;
    }

    // Pass 2: quantize, from the registers when the row is one tile.
    for (int t = 0; t < tiles; t++) {
      if (tiles > 1) load_x(t);
#pragma unroll
      for (int i = 0; i < VPT; i++) {
        const int c = chunk_col<VPT>(t, i);
        if (ZP == ZeroPoint::kNone) {
          float v[8];
#pragma unroll
          for (int j = 0; j < 8; j++) v[j] = QF_MUL_RN(x[i].f32(j), inv);
          store_q_chunk<ACC>(qr, c, p.cols, v);
        } else {
          // NOTES: cvt.rni rounds like qf_rne_i32 (RNE, NaN -> 0) and differs only past 2^30, where
          // both saturate; clamping to +-256 first keeps the sum with the zero point in range, and
          // the packing instruction saturates the sum to [-128, 127].
          int32_t q8[8];
#pragma unroll
          for (int j = 0; j < 8; j++) q8[j] = max(-256, min(256, cvt_rni_s32_f32(QF_MUL_RN(x[i].f32(j), inv)))) + zp;
          store_s8_chunk<ACC>(reinterpret_cast<uint8_t *>(qr), c, p.cols, q8);
        }
      }
    }
    __syncthreads();  // the slots are reused by the block's next row
  }
}
