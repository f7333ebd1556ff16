// The nearest-entry rule of quantize-on-append, shared by qf_vq_encode's kernels (vq_encode.cu)
// and the fused append of the banked attention kernel (vq_attention_banked.cuh): the CPU
// reference's fp32 squared distance in its order, and its choice of the lowest index among the
// smallest non-NaN distances (entry 0 where entry 0's distance is NaN), split over lanes.
#pragma once

#include <cuda_runtime.h>

// The squared distance of v to `entry`, the CPU's fp32 operations in its order (explicit rounding:
// no contraction into FMAs).
template <int kV>
__device__ __forceinline__ float distance(const float (&w)[kV], const float (&v)[kV], int vs) {
  const float diff0 = __fsub_rn(v[0], w[0]);
  float d = __fmul_rn(diff0, diff0);  // (the CPU's 0 + diff0^2: the same value, a square is never -0)
#pragma unroll
  for (int c = 1; c < kV; c++) {
    if (c < vs) {
      const float diff = __fsub_rn(v[c], w[c]);
      d = __fadd_rn(d, __fmul_rn(diff, diff));
    }
  }
  return d;
}

// The nearest entry by the CPU's rule, split over a group of kLanes lanes: each lane keeps its
// first smallest non-NaN distance over its entries in ascending order (nearest_keep), the group's
// reduction prefers the smaller distance and then the lower index (nearest_reduce), and the
// group's first lane says whether entry 0's distance was NaN (nearest_pick: entry 0 then, as the
// CPU keeps it; also where every distance is NaN). The book-resident encoder and the fused append
// interleave these steps over several vectors, their scans from the highest index down
// (nearest_step_down); nearest_by_group runs them for one.
__device__ __forceinline__ void nearest_keep(float d, int e, int &best, float &best_d) {
  if (d < best_d || (best < 0 && d == d)) best_d = d, best = e;
}
// The same lane rule for a scan from the highest index down, from best = -1 and best_d = +Inf:
// an entry no farther than the nearest so far replaces it (a NaN never compares, an equal
// distance of a lower index replaces, +Inf counts as a distance), one compare instead of three.
// (In nearest_by_group, whose loop bound is a run-time value, the descending scan ran one-row
// appends of CQ-4 up to 3% slower.)
__device__ __forceinline__ void nearest_keep_down(float d, int e, int &best, float &best_d) {
  if (d <= best_d) best_d = d, best = e;
}
__device__ __forceinline__ void nearest_reduce(int &best, float &best_d, int o) {  // one xor step (o below the group's lanes)
  const float od = __shfl_xor_sync(0xffffffffu, best_d, o);
  const int ob = __shfl_xor_sync(0xffffffffu, best, o);
  if (ob >= 0 && (best < 0 || od < best_d || (od == best_d && ob < best))) best_d = od, best = ob;
}
__device__ __forceinline__ int nearest_pick(bool nan0, int best, int lane, int sub) {
  return __shfl_sync(0xffffffffu, nan0, lane - sub) || best < 0 ? 0 : best;
}

// One entry's step of the descending scan for kN vectors at once (the book-resident encoder's rows,
// the fused append's tokens): e the entry's index, is0 for entry 0 (whose NaN distances
// nearest_pick needs).
template <int kN, int kV>
__device__ __forceinline__ void nearest_step_down(const float (&w)[kV], const float (&v)[kN][kV], int vs, int e, bool is0,
                                                  int (&best)[kN], float (&best_d)[kN], bool (&nan0)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; i++) {
    const float d = distance(w, v[i], vs);
    if (is0) nan0[i] = d != d;
    nearest_keep_down(d, e, best[i], best_d[i]);
  }
}

// The nearest of `entries` entries to v by that rule, by a group of kLanes lanes (this lane `sub`
// of it; dist(e): entry e's distance), each lane on entries sub, sub + kLanes, ...
template <int kLanes, typename Dist>
__device__ __forceinline__ int nearest_by_group(Dist dist, int entries, int lane, int sub) {
  int best = -1;
  float best_d = 0.0f;
  bool nan0 = false;
#pragma unroll 8
  for (int e = sub; e < entries; e += kLanes) {
    const float d = dist(e);
    if (e == 0) nan0 = d != d;
    nearest_keep(d, e, best, best_d);
  }
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) nearest_reduce(best, best_d, o);  // (within the lane group)
  return nearest_pick(nan0, best, lane, sub);
}
