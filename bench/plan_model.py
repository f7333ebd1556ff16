#!/usr/bin/env python3
"""Fits the block-scaled GEMM's plan time model (sm90_gemm_heuristic.h, kSm90PlanCosts) to a plan sweep.

Usage: bench/plan_model.py SWEEP.jsonl [SWEEP.jsonl ...]
SWEEP.jsonl holds qfuse-bench `gemm_fp8_blockscale_plans` rows (`plan=BMxBN/S`: a forced plan).
For each tile it fits, by least squares on relative error, the model's costs: a unit takes its
K-blocks at kb_us each plus unit_us, a split unit split_us more and, on the tiles of RANGE_TILES,
range_us for each range past the first (the header keeps the 192 x 128 tile's fit without it and
gives the 256 x 128 tile none: docs/GEMM.md); the SMs run the whole tiles
in rounds of `sms`, then the split units in one more round. Rows whose time the DRAM term
(bytes / DRAM_RATE + DRAM_US) or the L2 term (the operand tiles the CTAs load, / L2_RATE + L2_US),
as in the header, would set are left out of the fit. Prints each
tile's costs and the median and 90th-percentile error of the fitted model on its rows.
"""
import re
import sys
from collections import defaultdict

from plan_eval import sweep_times

SMS = 132
DRAM_RATE, DRAM_US = 3.12e6, 4.7  # bytes per us, us (the header's)
L2_RATE, L2_US = 9.5e6, 3.0  # bytes of operand tiles per us, us (the header's)
L2_RATE_128 = 10.5e6  # the 128 x 128 tiles' rate (the header's)
RANGE_TILES = {(64, 64), (64, 128), (128, 64), (128, 128)}  # tiles with a cost per range


def dims(shape):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", shape)}


def terms(M, N, K, bm, bn, s):
    """The model's time as kb_us * a + unit_us * b + split_us * c + range_us * d, and the larger of the
    DRAM and L2 floors."""
    num_kb, tiles = (K + 127) // 128, -(-M // bm) * -(-N // bn)
    if s == 1:
        rounds = -(-tiles // SMS)
        a, b, c, d, partials = rounds * num_kb, rounds, 0.0, 0.0, 0.0
    else:
        whole = 0 if tiles < SMS else tiles // SMS
        split_tiles = tiles - whole * SMS
        a, b, c = whole * num_kb + num_kb / s, whole + 1, 1.0
        d = s - 1.0 if (bm, bn) in RANGE_TILES else 0.0
        partials = 8.0 * bm * bn * split_tiles * s
    floor = (N * K + M * K + 2.0 * M * N + partials) / DRAM_RATE + DRAM_US
    l2_rate = L2_RATE_128 if (bm, bn) == (128, 128) else L2_RATE
    l2 = (-(-M // bm) * N + -(-N // bn) * M) * K / l2_rate + L2_US  # every tile row's B, every tile column's A
    return (a, b, c, d), max(floor, l2)


def solve(rows):
    """Least squares of sum ((x . t) / us - 1)^2 over rows (t, us), for x of 4, 3 or 2 costs."""
    n = 4 if any(t[3] for t, _ in rows) else 3 if any(t[2] for t, _ in rows) else 2
    ata = [[0.0] * n for _ in range(n)]
    atb = [0.0] * n
    for t, us in rows:
        v = [t[i] / us for i in range(n)]
        for i in range(n):
            atb[i] += v[i]
            for j in range(n):
                ata[i][j] += v[i] * v[j]
    # Gaussian elimination
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(ata[r][i]))
        ata[i], ata[p], atb[i], atb[p] = ata[p], ata[i], atb[p], atb[i]
        for r in range(i + 1, n):
            f = ata[r][i] / ata[i][i]
            for j in range(i, n):
                ata[r][j] -= f * ata[i][j]
            atb[r] -= f * atb[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (atb[i] - sum(ata[i][j] * x[j] for j in range(i + 1, n))) / ata[i][i]
    return x + [0.0] * (4 - n)


def main(paths):
    by_tile = defaultdict(dict)  # (bm, bn) -> {(shape, s): fastest us}
    for path in paths:
        for shape, plans in sweep_times(path)[0].items():
            for plan, us in plans.items():
                bm, bn, s = map(int, re.fullmatch(r"(\d+)x(\d+)/(\d+)", plan).groups())
                by_tile[(bm, bn)][(shape, s)] = min(us, by_tile[(bm, bn)].get((shape, s), float("inf")))
    print("| tile | kb_us | unit_us | split_us | range_us | rows fitted | median error | p90 error |")
    print("|---|---|---|---|---|---|---|---|")
    for tile in sorted(by_tile):
        data = []
        for (shape, s), us in by_tile[tile].items():
            d = dims(shape)
            t, floor = terms(d["M"], d["N"], d["K"], tile[0], tile[1], s)
            data.append((t, floor, us))
        fit = [(t, us) for t, floor, us in data]
        for _ in range(4):  # leave out the rows the DRAM floor sets under the current fit
            x = solve(fit)
            fit = [(t, us) for t, floor, us in data if sum(a * b for a, b in zip(x, t)) >= floor] or fit
        errs = sorted(abs(max(sum(a * b for a, b in zip(x, t)), floor) / us - 1) for t, floor, us in data)
        med, p90 = errs[len(errs) // 2], errs[min(len(errs) - 1, int(0.9 * len(errs)))]
        print(f"| {tile[0]}x{tile[1]} | {x[0]:.3f} | {x[1]:.2f} | {x[2]:.2f} | {x[3]:.3f} | {len(fit)} of {len(data)} | "
              f"{100 * med:.1f}% | {100 * p90:.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
