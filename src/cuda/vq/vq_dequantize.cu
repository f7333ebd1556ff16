// Launcher of the VQ dequantization kernel: picks the instantiation from the vector size, the
// entry dtype and the output dtype; a block per 256 vectors of a row, rows along y.
#include "cuda/common.cuh"
#include "cuda/vq/vq_dequantize.cuh"

namespace {

const char kOp[] = "qf_vq_dequantize";

template <typename E, typename Out>
qf_status launch(qf_ctx *ctx, const vq_dequantize_params &p) {
  const unsigned threads = 256;
  const dim3 blocks((p.vectors + threads - 1) / threads, static_cast<unsigned>(p.N < 65535 ? p.N : 65535));
  auto kernel = p.vs == 2   ? vq_dequantize_kernel<2, E, Out>
                : p.vs == 4 ? vq_dequantize_kernel<4, E, Out>
                : p.vs == 8 ? vq_dequantize_kernel<8, E, Out>
                            : vq_dequantize_kernel<0, E, Out>;
  kernel<<<blocks, threads, 0, qf_stream(ctx)>>>(p);
  return qf_cuda_check_launch(ctx, kOp);
}

template <typename E>
qf_status launch_out(qf_ctx *ctx, const vq_dequantize_params &p, qf_dtype out) {
  switch (out) {
    case QF_BF16: return launch<E, __nv_bfloat16>(ctx, p);
    case QF_F16: return launch<E, __half>(ctx, p);
    default: return launch<E, float>(ctx, p);
  }
}

}  // namespace

extern "C" qf_status qf_cuda_vq_dequantize(qf_ctx *ctx, const qf_vq_tensors *t, const qf_mat *w) {
  const qf_vq_format &f = t->fmt;
  // Bit offsets inside a code row and vector indices are 32-bit.
  if (t->sz.row_bytes > (INT64_C(1) << 28) || t->K / f.vector_size > INT32_MAX)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: rows of K=%lld are too long for 32-bit code offsets", kOp,
                   static_cast<long long>(t->K));
  vq_dequantize_params p = {};
  vq_weight_params(p, t);
  p.w = w->data;
  p.w_ld = w->ld;
  p.N = t->N;
  p.books_per_row = t->sz.books_per_row;
  p.scope_rows = f.scope_rows;
  p.row_words = static_cast<uint32_t>(t->sz.row_bytes / 4);
  p.vectors = static_cast<uint32_t>(t->K / f.vector_size);
  p.vectors_per_book = static_cast<uint32_t>(f.scope_cols ? f.scope_cols / f.vector_size : t->K / f.vector_size);
  p.vs = f.vector_size;
  p.bits = f.index_bits;
  p.residuals = f.residuals;
  p.entries = static_cast<int>(t->sz.entries);
  const size_t vec_bytes = static_cast<size_t>(f.vector_size) * qf_dtype_size(w->dtype);
  // (used by the compile-time vector sizes only)
  p.vec_store = reinterpret_cast<uintptr_t>(w->data) % vec_bytes == 0 && (w->ld % f.vector_size == 0 || t->N == 1);
  if (p.N == 0 || p.vectors == 0) return QF_OK;
  return f.entry_dtype == QF_BF16 ? launch_out<vq_bf16>(ctx, p, w->dtype) : launch_out<vq_f16>(ctx, p, w->dtype);
}
