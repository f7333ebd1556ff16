#!/usr/bin/env python3
"""Markdown tables from qfuse-bench JSON lines.

Usage: bench/summarize.py FILE.jsonl [OP ...] [--peer NAME] [--min-m N]
  --peer   only rows measured against this peer (e.g. torch.compile in merge.py's output)
  --min-m  only rows whose shape has M >= N
"""
import argparse
import re

from jsonl import read_rows


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def shape_m(row):
    m = re.search(r"(?:^|,)M=(\d+)", row["shape"])
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("ops", nargs="*")
    ap.add_argument("--peer")
    ap.add_argument("--min-m", type=int)
    args = ap.parse_args()
    ops = set(args.ops)
    rows = read_rows(args.path)
    ceil = [r for r in rows if r["op"].startswith("ceiling")]
    if args.peer:
        rows = [r for r in rows if r["peer"] == args.peer]
    if args.min_m is not None:
        rows = [r for r in rows if (shape_m(r) or 0) >= args.min_m]
    if ceil and not ops:
        r0 = ceil[0]
        print(f"Device: {r0['device']}, commit {r0['commit']}.\n")
        for r in ceil:
            val = f"{r['gbps']:.0f} GB/s" if r["gbps"] else f"{r['tflops']:.0f} TFLOPS"
            print(f"- {r['op']} ({r['variant']}, {r['shape']}): {val}")
        print()
    print("| op | variant | shape | us | GB/s | TFLOPS | % floor | % read | peer | peer us | speedup |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        if r["op"].startswith("ceiling") or (ops and r["op"] not in ops):
            continue
        print(f"| {r['op']} | {r['variant']} | {r['shape']} | {fmt(r['us'], '.2f')} | {fmt(r['gbps'], '.0f')} | "
              f"{fmt(r['tflops'], '.0f')} | {fmt(r['pct_floor'], '.1f')} | {fmt(r.get('pct_read'), '.1f')} | {r['peer'] or '-'} | "
              f"{fmt(r['peer_us'], '.2f')} | {fmt(r['ratio'], '.2f')} |")


if __name__ == "__main__":
    main()
