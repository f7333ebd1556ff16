// Bulk tensor copies (TMA, sm_90). One asm statement each. The tensor map is a CUtensorMap built
// on the host and passed as a __grid_constant__ kernel parameter; its generic address is used.
#pragma once

#include <cstdint>

#include "cuda/ptx/arch.cuh"

// prefetch.tensormap: brings the descriptor into the cache ahead of the first copy.
__device__ __forceinline__ void prefetch_tensormap(const void *tmap) {
  QF_ASM_SM90("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes: copies the box at
// element coordinates (c0 innermost, c1) into shared memory at `dst`, zero-filling elements out
// of the tensor's bounds, and signals the box's full byte count on the mbarrier `bar`.
__device__ __forceinline__ void cp_async_bulk_tensor_2d_g2s(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                                            int32_t c1) {
  QF_ASM_SM90(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// ... the same with a 4-D tensor map, coordinates c0 (innermost) to c3.
__device__ __forceinline__ void cp_async_bulk_tensor_4d_g2s(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                                            int32_t c1, int32_t c2, int32_t c3) {
  QF_ASM_SM90(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// cp.async.bulk (no tensor map): `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global memory into this CTA's shared memory, counted as transaction bytes on the mbarrier `bar`.
__device__ __forceinline__ void cp_async_bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  QF_ASM_SM90("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
              "l"(src), "r"(bytes), "r"(bar)
              : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta.bulk_group: copies the box at `src` in shared memory
// to the tensor at element coordinates (c0 innermost, c1); elements out of the tensor's bounds
// are not written. Tracked by the issuing thread's bulk async-groups.
__device__ __forceinline__ void cp_async_bulk_tensor_2d_s2g(const void *tmap, uint32_t src, int32_t c0, int32_t c1) {
  QF_ASM_SM90("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                  reinterpret_cast<uint64_t>(tmap)),
              "r"(c0), "r"(c1), "r"(src)
              : "memory");
}

// cp.async.bulk.commit_group: closes this thread's group of bulk copies issued so far.
__device__ __forceinline__ void cp_async_bulk_commit_group() { QF_ASM_SM90("cp.async.bulk.commit_group;\n" ::: "memory"); }

// cp.async.bulk.wait_group.read N: waits until at most N of this thread's bulk groups still read
// their shared-memory source (the source may then be overwritten).
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group_read() {
  QF_ASM_SM90("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// cp.async.bulk.wait_group N: waits until at most N of this thread's bulk groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group() {
  QF_ASM_SM90("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
