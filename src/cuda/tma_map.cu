// Tensor maps for the sm_90 kernels (tma_map.h).
#include <cudaTypedefs.h>

#include "cuda/common.cuh"
#include "cuda/tma_map.h"

namespace {

// cuTensorMapEncodeTiled, looked up once (its absence is reported by the caller).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn() {
  static const auto fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(qf_cuda_driver_fn("cuTensorMapEncodeTiled", 12000));
  return fn;
}

// A 2-D map of `rows` rows of `cols` elements, `pitch` bytes apart, in boxes of box_cols x
// box_rows elements.
qf_status encode_2d(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const void *data,
                    CUtensorMapDataType type, int64_t rows, int64_t cols, int64_t pitch, uint32_t box_cols,
                    uint32_t box_rows, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_fn();
  if (encode == nullptr)
    return qf_fail(ctx, QF_ERR_CUDA, "%s: the driver does not provide cuTensorMapEncodeTiled", op);
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0 || pitch % 16 != 0)
    return qf_fail(ctx, QF_ERR_ALIGNMENT, "%s: %s needs a 16-byte aligned start and row pitch (%lld bytes)", op, name,
                   static_cast<long long>(pitch));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, type, 2, const_cast<void *>(data), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return qf_fail(ctx, QF_ERR_CUDA, "%s: cuTensorMapEncodeTiled failed for %s [%lld, %lld] (%lld-byte rows, CUresult %d)",
                   op, name, static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(pitch),
                   static_cast<int>(r));
  return QF_OK;
}

}  // namespace

qf_status qf_cuda_make_tmap_heads(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const void *data,
                                  qf_dtype dtype, const int64_t dims[4], const int64_t strides[3], uint32_t box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_fn();
  if (encode == nullptr)
    return qf_fail(ctx, QF_ERR_CUDA, "%s: the driver does not provide cuTensorMapEncodeTiled", op);
  const cuuint64_t size[4] = {static_cast<cuuint64_t>(dims[3]), static_cast<cuuint64_t>(dims[1] > 0 ? dims[1] : 1),
                              static_cast<cuuint64_t>(dims[2]), static_cast<cuuint64_t>(dims[0])};
  const bool codes = dtype == QF_E4M3FN;
  const int esize = codes ? 1 : 2;
  const cuuint64_t pitch[3] = {static_cast<cuuint64_t>(strides[1] * esize), static_cast<cuuint64_t>(strides[2] * esize),
                               static_cast<cuuint64_t>(strides[0] * esize)};
  const cuuint32_t box[4] = {64, box_rows, 1, 1}, elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = codes ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == QF_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(map, type, 4, const_cast<void *>(data), size, pitch, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            codes ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return qf_fail(ctx, QF_ERR_CUDA, "%s: cuTensorMapEncodeTiled failed for %s [%lld, %lld, %lld, %lld] (CUresult %d)", op,
                   name, static_cast<long long>(dims[0]), static_cast<long long>(dims[1]), static_cast<long long>(dims[2]),
                   static_cast<long long>(dims[3]), static_cast<int>(r));
  return QF_OK;
}

qf_status qf_cuda_make_tmap(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const qf_mat &m,
                            uint32_t box_rows) {
  const bool bytes = m.dtype == QF_E4M3FN || m.dtype == QF_I8;
  const int esize = bytes ? 1 : 2;
  const CUtensorMapDataType type = bytes ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : m.dtype == QF_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  // A single row's pitch is never used: any multiple of 16 bytes will do.
  const int64_t pitch = m.rows == 1 ? (m.cols * esize + 15) / 16 * 16 : m.ld * esize;
  return encode_2d(ctx, op, map, name, m.data, type, m.rows, m.cols, pitch, 128 / esize, box_rows,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

qf_status qf_cuda_make_tmap_bytes(qf_ctx *ctx, const char *op, CUtensorMap *map, const char *name, const void *data,
                                  int64_t rows, int64_t cols, int64_t pitch, uint32_t box_cols, uint32_t box_rows,
                                  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  return encode_2d(ctx, op, map, name, data, CU_TENSOR_MAP_DATA_TYPE_UINT8, rows, cols, pitch, box_cols, box_rows,
                   swizzle, promotion);
}
