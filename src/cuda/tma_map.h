// Tensor maps (TMA descriptors) for the sm_90 kernels, encoded on the host.
#pragma once

#include <cuda.h>

#include "core/backend.h"

// Tensor map of a [rows, cols] matrix (row pitch ld elements; e4m3fn, int8, fp16 or bf16) moved
// in boxes of box_rows x 128 bytes, 128-byte swizzled: the layout that wgmma_desc_kmajor_sw128
// describes (and the GEMM's 16-bit D staging tile). Elements past the matrix read as zeros.
// QF_ERR_ALIGNMENT unless the start and the row pitch are 16-byte aligned.
qf_status qf_cuda_make_tmap(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const qf_mat &m,
                            uint32_t box_rows);

// Tensor map of `rows` rows of `cols` bytes, `pitch` bytes apart (a multiple of 16), in boxes of
// box_cols bytes (a multiple of 16) x box_rows rows, row r of a box at r * box_cols: unswizzled,
// or with the given swizzle of its 16-byte chunks. A miss brings `promotion` bytes around it into
// the L2 (256 unless said).
qf_status qf_cuda_make_tmap_bytes(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const void *data,
                                  int64_t rows, int64_t cols, int64_t pitch, uint32_t box_cols, uint32_t box_rows,
                                  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B);

// Tensor map of a 16-bit (fp16 / bf16) tensor [B, S, H, D] with the last dimension contiguous and
// element strides {batch, token, head} (multiples of 8), as the 4-D map (D, S, H, B), in boxes of
// 64 columns x box_rows tokens of one head, 128-byte swizzled (a plane of the attention kernels'
// tiles); for e4m3fn codes (strides multiples of 16) the same boxes unswizzled, 64-byte rows one
// after another. Tokens past S read as zeros. S = 0 is encoded as one token (never read).
qf_status qf_cuda_make_tmap_heads(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const void *data,
                                  qf_dtype dtype, const int64_t dims[4], const int64_t strides[3], uint32_t box_rows);
