#!/usr/bin/env python3
"""The table of a same-call A/B (scripts/ab): for each (op, variant, shape) the fastest time of
each build over its rounds, every time, and base / new (above 1: the new build is faster).

Usage: bench/ab.py AB.jsonl BASE_LABEL NEW_LABEL
Rows are matched by their commit field, LABEL-ROUND. Prints the geometric mean of the ratios last.
"""
import argparse
import collections
import math

from jsonl import read_rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("base")
    ap.add_argument("new")
    args = ap.parse_args()
    times = collections.defaultdict(lambda: {args.base: [], args.new: []})
    for r in read_rows(args.path):
        label = r["commit"].rsplit("-", 1)[0]
        if label in (args.base, args.new) and r.get("us") and not r["op"].startswith("ceiling"):
            times[(r["op"], r["variant"], r["shape"])][label].append(r["us"])
    print(f"| op | variant | shape | {args.base} us | {args.new} us | ratio |")
    print("|---|---|---|---|---|---|")
    logs = []
    for (op, variant, shape), t in times.items():
        if not t[args.base] or not t[args.new]:
            continue
        ratio = min(t[args.base]) / min(t[args.new])
        logs.append(math.log(ratio))
        fmt = lambda v: " / ".join(f"{x:.2f}" for x in v)  # noqa: E731
        print(f"| {op} | {variant} | {shape} | {fmt(t[args.base])} | {fmt(t[args.new])} | {ratio:.3f} |")
    if not logs:
        raise SystemExit("bench/ab.py: no row of both builds")
    print(f"\n{len(logs)} rows, geomean ratio {math.exp(sum(logs) / len(logs)):.3f} "
          f"({math.exp(min(logs)):.3f} to {math.exp(max(logs)):.3f})")


if __name__ == "__main__":
    main()
