// cp.async (non-bulk asynchronous copies into shared memory) with mbarrier completion (sm_80+;
// used on sm_90 for operands too small for TMA boxes). One asm statement each.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

// cp.async.ca.shared.global, 4 bytes: copies src_bytes (4, or 0 to write a zero without reading
// `src`) from global `src` to shared `dst`.
__device__ __forceinline__ void cp_async_ca_shared_global_4(uint32_t dst, const void *src, uint32_t src_bytes) {
  QF_ASM_SM90("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// cp.async.mbarrier.arrive.noinc: one arrival on `bar` once every cp.async this thread issued
// before it has completed. noinc: the arrival is one of the count given to mbarrier.init.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
  QF_ASM_SM90("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}

// cp.async.cg.shared.global, 16 bytes (both addresses 16-byte aligned), cached in L2 only.
__device__ __forceinline__ void cp_async_cg_shared_global_16(uint32_t dst, const void *src) {
  QF_ASM_SM90("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// cp.async.commit_group: closes this thread's group of the cp.async issued since the last one.
__device__ __forceinline__ void cp_async_commit_group() { QF_ASM_SM90("cp.async.commit_group;\n" ::: "memory"); }

// cp.async.wait_group N: waits until at most N of this thread's committed groups are pending (the
// older ones' writes are then visible to this thread).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  QF_ASM_SM90("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// cp.async.wait_all (a commit_group and wait_group 0 in one): waits until every cp.async this
// thread issued has completed (its writes are then visible to this thread).
__device__ __forceinline__ void cp_async_wait_all() { QF_ASM_SM90("cp.async.wait_all;\n" ::: "memory"); }

// cp.async.cg.shared.global, 16 bytes with a source size: copies src_bytes (16, or 0 to write
// zeros without reading `src`) and fills the rest of the 16 bytes with zeros.
__device__ __forceinline__ void cp_async_cg_shared_global_16_zfill(uint32_t dst, const void *src, uint32_t src_bytes) {
  QF_ASM_SM90("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
