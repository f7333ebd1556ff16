#!/usr/bin/env python3
"""Pairs qfuse-bench rows with torch peer rows of the same op, variant, shape and device.

Usage: merge.py QFUSE.jsonl TORCH.jsonl --out FILE
Writes to FILE, for each qfuse CUDA row with a matching torch.compile and/or torch row, a copy of
the qfuse row with peer = that backend, peer_us = its time and ratio = peer_us / us. Rows pair
only when they were timed the same way (the `timing` key; rows without one are event time).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jsonl import read_rows  # noqa: E402  (bench/jsonl.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("qfuse")
    ap.add_argument("torch")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    peers = {(r["op"], r["variant"], r["shape"], r["device"], r["backend"], r.get("timing", "event")): r["us"]
             for r in read_rows(args.torch) if r.get("us")}
    n = 0
    with open(args.out, "w") as out:
        for r in read_rows(args.qfuse):
            if r.get("backend") != "cuda" or not r.get("us"):
                continue
            for backend in ("torch.compile", "torch"):
                # a fast_exp row computes the same math as its exact variant: one peer for both
                variant = r["variant"].removesuffix(",fast_exp")
                peer_us = peers.get((r["op"], variant, r["shape"], r["device"], backend, r.get("timing", "event")))
                if peer_us:
                    out.write(json.dumps(dict(r, peer=backend, peer_us=peer_us,
                                              ratio=round(peer_us / r["us"], 6)), separators=(",", ":")) + "\n")
                    n += 1
    print(f"merge.py: {n} peer rows -> {args.out}")


if __name__ == "__main__":
    main()
