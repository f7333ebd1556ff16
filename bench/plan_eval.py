#!/usr/bin/env python3
"""Scores the block-scaled GEMM's plan choice against a plan sweep, without a GPU.

Usage: bench/plan_eval.py [--plan TOOL] [--base TOOL] [--sms N] [--dram GBPS] [--base-dram GBPS] [--worst R]
                          SWEEP.jsonl [...]

SWEEP.jsonl holds qfuse-bench `gemm_fp8_blockscale_plans` rows: per shape every forced plan
(`plan=BMxBN/S`) timed in one run. TOOL is a build's qfuse-plan (default build/tools/qfuse-plan),
which prints the plan of the header it was built from (src/cuda/gemm/sm90_gemm_heuristic.h), so a
change to the rules or the time model is scored by rebuilding qfuse-plan alone. For each sweep it
prints how far the chosen plans are from the fastest forced plan (geometric mean over the shapes)
and the shapes at R times their fastest or more (default 1.05). A chosen plan the sweep does not
force (the 128 x 192 tiles, a round of owners and helpers) takes the `auto` row's time when that
row ran the same plan, and is left out otherwise.

--dram passes the device's peak DRAM bandwidth to qfuse-plan (some decode rules read it: an H200
sweep with 4800, an H100's with 3350 or none), --base-dram the same to the base tool.

With --base TOOL2 it lists instead the shapes whose plan differs between the two tools and, per
sweep, the base plan's time over the new one's and their geometric mean: what a change to the
heuristic would do on the GPUs the sweeps were taken on, from their forced rows.
"""
import argparse
import math
import re
import subprocess
from collections import defaultdict

from jsonl import read_rows


def sweep_times(path):
    """{shape: {plan: fastest us}} over the forced rows, and {shape: (auto plan, us)}."""
    forced, auto = defaultdict(dict), {}
    for r in read_rows(path):
        m = re.fullmatch(r"(plan|auto)=(\S+)", r.get("variant", ""))
        if r.get("op") != "gemm_fp8_blockscale_plans" or not m or not r.get("us"):
            continue
        if m.group(1) == "plan":
            forced[r["shape"]][m.group(2)] = min(r["us"], forced[r["shape"]].get(m.group(2), math.inf))
        else:
            auto[r["shape"]] = (m.group(2), r["us"])
    return forced, auto


def picks(tool, shapes, sms, dram=0):
    """{shape: plan} from qfuse-plan."""
    args = [tool, "--sms", str(sms)] + (["--dram", str(dram)] if dram else [])
    out = subprocess.run(args, input="\n".join(shapes) + "\n", capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def time_of(shape, plan, forced, auto):
    if plan in forced.get(shape, {}):
        return forced[shape][plan]
    if shape in auto and auto[shape][0] == plan:
        return auto[shape][1]
    return None


def shape_key(shape):
    return [int(x) for x in re.findall(r"\d+", shape)]


def score(path, tool, sms, worst, dram):
    forced, auto = sweep_times(path)
    shapes = sorted(forced, key=shape_key)
    chosen = picks(tool, shapes, sms, dram)
    logs, missing = [], 0
    for s in shapes:
        t = time_of(s, chosen[s], forced, auto)
        if t is None:
            missing += 1
            continue
        best_plan, best = min(forced[s].items(), key=lambda kv: kv[1])
        logs.append(math.log(t / best))
        if t / best >= worst:
            print(f"  {s:28} {chosen[s]:>14} {t:9.2f} us, fastest {best_plan} {best:.2f} us: {t / best:.3f}x")
    loss = 100 * (math.exp(sum(logs) / len(logs)) - 1) if logs else float("nan")
    print(f"{path}: {loss:.2f}% from the fastest plan over {len(logs)} shapes ({missing} chosen plans not timed)")


def compare(paths, tool, base, sms, dram, base_dram):
    sweeps = [sweep_times(p) for p in paths]
    shapes = sorted(set().union(*(f.keys() for f, _ in sweeps)), key=shape_key)
    new, old = picks(tool, shapes, sms, dram), picks(base, shapes, sms, base_dram)
    logs = [[] for _ in paths]
    for s in shapes:
        if new[s] == old[s]:
            continue
        line = f"{s:28} {old[s]:>14} -> {new[s]:<14}"
        for i, (forced, auto) in enumerate(sweeps):
            t_old, t_new = time_of(s, old[s], forced, auto), time_of(s, new[s], forced, auto)
            if t_old and t_new:
                logs[i].append(math.log(t_old / t_new))
                line += f" | {t_old:.2f} -> {t_new:.2f} us, {t_old / t_new:.3f}x"
            else:
                line += " | not timed"
        print(line)
    for path, l in zip(paths, logs):
        if l:
            print(f"{path}: {len(l)} shapes change, {math.exp(sum(l) / len(l)):.4f}x faster in geometric mean")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--plan", default="build/tools/qfuse-plan")
    ap.add_argument("--base")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--dram", type=float, default=0)
    ap.add_argument("--base-dram", type=float, default=0)
    ap.add_argument("--worst", type=float, default=1.05)
    a = ap.parse_args()
    if a.base:
        compare(a.sweeps, a.plan, a.base, a.sms, a.dram, a.base_dram)
    else:
        for p in a.sweeps:
            score(p, a.plan, a.sms, a.worst, a.dram)


if __name__ == "__main__":
    main()
