// Host side of the VQ-GeMV launch: the instantiations of one codebook placement, from one list,
// and their launch on a persistent grid. Each placement's kernels live in their own translation
// unit (vq_gemv_global.cu, vq_gemv_shared.cu), whose launchers the entry points in vq_gemv.cu
// call.
#pragma once

#include <atomic>

#include "cuda/common.cuh"
#include "cuda/vq/vq_gemv.cuh"

// The compile-time variants of one placement, for fp16 and bf16 entries: the vector sizes with
// their own code (the others run kVS = 0), the residual buckets and the M buckets of
// vq_heuristic.h.
#define QF_VQ_GEMV_VECTOR_SIZES(X) X(2) X(4) X(8)
#define QF_VQ_GEMV_RESIDUALS(X) X(1) X(2) X(4)
#define QF_VQ_GEMV_M_BUCKETS(X) X(1) X(2) X(4) X(8) X(16)

namespace vq_gemv_detail {

using kernel_t = void (*)(vq_gemv_params);
#define QF_VQ_GEMV_COUNT(x) +1
constexpr int kVectorSizes = 1 QF_VQ_GEMV_VECTOR_SIZES(QF_VQ_GEMV_COUNT);  // + the generic path
constexpr int kResiduals = 0 QF_VQ_GEMV_RESIDUALS(QF_VQ_GEMV_COUNT);
constexpr int kMBuckets = 0 QF_VQ_GEMV_M_BUCKETS(QF_VQ_GEMV_COUNT);
constexpr int kKernels = kVectorSizes * kResiduals * kMBuckets * 2;
#undef QF_VQ_GEMV_COUNT

// Each level picks its template argument and adds its index to `slot` (a kernel's place among
// kKernels, for the per-kernel shared-memory opt-in); nullptr when a bucket has no kernel.
template <class Placement, typename E, int kM, int kR>
kernel_t pick_vs(int vs, int &slot) {
  slot *= kVectorSizes;
#define QF_VQ_GEMV_VS_CASE(VS)                                 \
  if (vs == VS) return vq_gemv_kernel<VS, E, kM, kR, Placement>; \
  slot++;
  QF_VQ_GEMV_VECTOR_SIZES(QF_VQ_GEMV_VS_CASE)
#undef QF_VQ_GEMV_VS_CASE
  return vq_gemv_kernel<0, E, kM, kR, Placement>;
}

template <class Placement, typename E, int kM>
kernel_t pick_r(int r_bucket, int vs, int &slot) {
  slot *= kResiduals;
#define QF_VQ_GEMV_R_CASE(R)                                     \
  if (r_bucket == R) return pick_vs<Placement, E, kM, R>(vs, slot); \
  slot++;
  QF_VQ_GEMV_RESIDUALS(QF_VQ_GEMV_R_CASE)
#undef QF_VQ_GEMV_R_CASE
  return nullptr;
}

template <class Placement, typename E>
kernel_t pick(int m_bucket, int r_bucket, int vs, int &slot) {
  slot *= kMBuckets;
#define QF_VQ_GEMV_M_CASE(MB)                                               \
  if (m_bucket == MB) return pick_r<Placement, E, MB>(r_bucket, vs, slot); \
  slot++;
  QF_VQ_GEMV_M_BUCKETS(QF_VQ_GEMV_M_CASE)
#undef QF_VQ_GEMV_M_CASE
  return nullptr;
}

}  // namespace vq_gemv_detail

template <class Placement>
qf_status vq_gemv_launch(qf_ctx *ctx, const vq_gemv_params &p, const qf_vq_gemv_config &cfg, bool bf16_entries) {
  using namespace vq_gemv_detail;
  static const char op[] = "qf_vq_gemm";
  int slot = bf16_entries ? 1 : 0;
  const int r_bucket = QF_VQ_GEMV_R_BUCKET(p.residuals);
  const kernel_t kernel = bf16_entries ? pick<Placement, vq_bf16>(cfg.m_bucket, r_bucket, p.vs, slot)
                                       : pick<Placement, vq_f16>(cfg.m_bucket, r_bucket, p.vs, slot);
  if (kernel == nullptr)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: no kernel for M bucket %d and %d residuals", op, cfg.m_bucket, p.residuals);

  // Raised to the device's limit: the heuristic has sized the block's shared memory within it.
  static std::atomic<uint64_t> opted_in[kKernels];
  if (qf_status st = qf_cuda_smem_opt_in(ctx, op, kernel, ctx->smem_optin, opted_in[slot]); st != QF_OK) return st;
  cudaError_t err;

  const int threads = cfg.warps * 32;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, cfg.smem_bytes);
  if (err != cudaSuccess) return qf_cuda_fail(ctx, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  if (per_sm < 1)
    return qf_fail(ctx, QF_ERR_UNSUPPORTED, "%s: a block of %d threads with %zu bytes of shared memory does not fit an SM",
                   op, threads, cfg.smem_bytes);
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * per_sm;
  const unsigned grid = static_cast<unsigned>(p.tiles < slots ? p.tiles : slots);
  kernel<<<grid, threads, cfg.smem_bytes, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, op);
}
