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
