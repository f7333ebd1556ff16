// Launcher of the per-token-group quantization kernel (qf_quant_group and
// qf_silu_mul_quant_group): the instantiation from the dtypes, the group size and the activation,
// the access width from the row pitches, the tile shape from the scale layout and the extents,
// and a persistent grid sized from the SM count.
#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/quant/group_quant.cuh"

namespace {

int ceil_log2(int64_t n) {
  int l = 0;
  while ((int64_t(1) << l) < n) l++;
  return l;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// At most 8 rows per warp tile: 8 consecutive fp32 scales fill a 32-byte sector, and a block
// then covers at least 2 KB of each of its rows, which keeps DRAM pages open (tall tiles of short
// row pieces ran at 60% of the copy bandwidth).
constexpr int kMaxLogTileRows = 3;

// log2 of the warps a block lines up along the groups, for rows of wtiles warp tiles: the most
// (wider row pieces keep DRAM pages open) that leave at most 1/8 of the warps of the last column
// of blocks idle (rows of 288 groups of 64 in warp tiles of 16: 8 warps along the row idle 6 of
// 24, 4 idle 2 of 20). One warp along the groups idles none.
int warps_along_groups(int64_t wtiles) {
  for (int l = std::min(ceil_log2(wtiles), ceil_log2(kGroupWarps)); l > 0; l--) {
    const int64_t slots = ceil_div(wtiles, int64_t(1) << l) << l;
    if (8 * (slots - wtiles) <= slots) return l;
  }
  return 0;
}

// Fills p from the validated arguments for groups of G. The tile shape (see group_quant.cuh):
// column-major scales take as many rows per warp as the rows allow (UE8M0 words need 4 groups
// per warp), row-major scales as many groups as the row has; warps then line up along the groups.
qf_status make_params(qf_ctx *ctx, const char *op, const qf_group_quant_args *a, int G, int log_entries,
                      GroupQuantParams *p) {
  const int64_t rows = a->q.rows, groups = a->q.cols / G, scale_rows = rows + a->scales.pad_rows;
  const bool packed = a->scales.format == QF_SCALE_UE8M0_PACKED;
  const int ltr = a->scales.layout == QF_SCALE_ROW_MAJOR
                      ? log_entries - std::min(ceil_log2(groups), log_entries)
                      : std::min({ceil_log2(scale_rows), log_entries - (packed ? 2 : 0), kMaxLogTileRows});
  const int64_t warp_groups = int64_t(1) << (log_entries - ltr);
  const int lwg = warps_along_groups(ceil_div(groups, warp_groups));
  const int64_t block_rows = int64_t(kGroupWarps >> lwg) << ltr, block_groups = warp_groups << lwg;
  const int64_t row_tiles = ceil_div(scale_rows, block_rows), col_tiles = ceil_div(groups, block_groups);
  if (row_tiles * col_tiles > INT32_MAX || groups > INT32_MAX / 2)
    return qf_fail(ctx, QF_ERR_SHAPE, "%s: %lld x %lld elements are too many for one launch", op, (long long)rows,
                   (long long)a->q.cols);

  *p = GroupQuantParams{};
  p->x = a->x.data;
  p->x_ld = a->x.ld;
  p->up_col = a->q.cols;
  p->q = static_cast<uint8_t *>(a->q.data);
  p->q_ld = a->q.ld;
  p->scales = a->scales.data;
  p->scales_ld = a->scales.ld;
  p->layout = a->scales.layout;
  p->format = a->scales.format;
  p->scale_min = a->scales.scale_min;
  p->ub = a->scales.ub;
  p->alpha = a->alpha;
  p->limit = a->limit;
  p->up_plus_one = a->up_plus_one;
  p->rows = rows;
  p->scale_rows = scale_rows;
  p->groups = static_cast<int>(groups);
  p->log_tile_rows = ltr;
  p->log_warps_g = lwg;
  p->row_tiles = static_cast<uint32_t>(row_tiles);
  p->col_tiles = static_cast<uint32_t>(col_tiles);
  return QF_OK;
}

template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kGroupThreads, 0) != cudaSuccess) {
    cudaGetLastError();  // not sticky; the launch reports any real problem
    n = 1;
  }
  return n > 0 ? n : 1;
}

template <typename Tin, typename Tout, int G, GroupAct ACT, GroupAccess ACC>
qf_status launch(qf_ctx *ctx, const char *op, const GroupQuantParams &p) {
  const auto kernel = group_quant_kernel<Tin, Tout, G, ACT, ACC>;
  static const int per_sm = resident_blocks(kernel);
  const int64_t slots = int64_t(ctx->sm_count > 0 ? ctx->sm_count : 1) * per_sm;
  const int64_t tiles = int64_t(p.row_tiles) * p.col_tiles;
  const unsigned grid = static_cast<unsigned>(tiles < slots ? tiles : slots);
  // (the kPdl instantiation has the same resources)
  return qf_cuda_launch(ctx, op, kernel, group_quant_kernel<Tin, Tout, G, ACT, ACC, true>, dim3(grid), dim3(kGroupThreads), 0,
                        p);
}

template <typename Tin, typename Tout, int G, GroupAct ACT>
qf_status run(qf_ctx *ctx, const char *op, const qf_group_quant_args *a) {
  GroupQuantParams p;
  qf_status st = make_params(ctx, op, a, G, ceil_log2(kGroupEntries<Tin, ACT, G>), &p);
  if (st != QF_OK) return st;
  // 16-byte vectors need every row start aligned: 16 bytes of input (the up half starts at column
  // K, a multiple of 32 elements), 8 bytes of output; the data pointers are 16-byte aligned.
  const bool vec = (a->x.ld * int64_t(sizeof(Tin))) % 16 == 0 && a->q.ld % 8 == 0;
  return vec ? launch<Tin, Tout, G, ACT, GroupAccess::kVec16>(ctx, op, p)
             : launch<Tin, Tout, G, ACT, GroupAccess::kScalar>(ctx, op, p);
}

template <typename F>
qf_status with_input(qf_dtype t, F f) {
  switch (t) {
    case QF_BF16: return f(__nv_bfloat16{});
    case QF_F16: return f(__half{});
    default: return f(float{});
  }
}

template <typename F>
qf_status with_output(qf_dtype t, F f) {
  switch (t) {
    case QF_E4M3FN: return f(e4m3fn_t{});
    case QF_E4M3FNUZ: return f(e4m3fnuz_t{});
    default: return f(int8_out_t{});
  }
}

template <typename F>
qf_status with_group(int g, F f) {
  switch (g) {
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    default: return f(std::integral_constant<int, 128>{});
  }
}

}  // namespace

extern "C" qf_status qf_cuda_quant_group(qf_ctx *ctx, const qf_group_quant_args *a) {
  const char *op = a->glu ? "qf_silu_mul_quant_group" : "qf_quant_group";
  return with_input(a->x.dtype, [&](auto in) {
    return with_output(a->q.dtype, [&](auto out) {
      return with_group(a->group_size, [&](auto g) {
        using Tin = decltype(in);
        using Tout = decltype(out);
        constexpr int G = decltype(g)::value;
        if (!a->glu) return run<Tin, Tout, G, GroupAct::kNone>(ctx, op, a);
        if constexpr (sizeof(Tin) == 2)
          return a->fast_exp ? run<Tin, Tout, G, GroupAct::kGluFast>(ctx, op, a) : run<Tin, Tout, G, GroupAct::kGlu>(ctx, op, a);
        return qf_fail(ctx, QF_ERR_DTYPE, "%s: the gated activation takes bf16 or fp16 input", op);
      });
    });
  });
}
