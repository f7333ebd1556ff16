#!/usr/bin/env python3
"""qf_gemm_nvfp4 against torch's bf16 GEMM (cuBLAS) on the dequantized weight, in one process.

Hopper has no FP4 tensor cores, so what an engine runs there instead of NVFP4 weights is a 16-bit
GEMM: torch.matmul of bf16 activations with the same weight dequantized to bf16. Both are timed as
in attention_torch.py (kernel time from torch.profiler, L2 flushed by a read pass before each run);
the memory floor is the NVFP4 GEMM's bytes (codes, scales, activations, output) over the copy
bandwidth of the same run. Appends JSON lines in qfuse-bench's schema (peer_us, ratio = peer_us /
us). Usage: nvfp4_torch.py --jsonl FILE [--quick] [--reps N]
"""
import argparse
import json
import sys

import torch

import qfuse
from attention_torch import gpu_setup, time_us_named
from quant_torch import time_us

# (N, K) of DeepSeek-V3's projections (the block-scaled FP8 GEMM's shapes) and Llama-70B's
# (8192 x 8192, 28672 x 8192); M = 1 to 16 is decode, 128 and 2048 prefill.
NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (8192, 8192),
      (28672, 8192)]
MS = [1, 16, 64, 128, 2048]
QUICK_M, QUICK_NK = {1, 16, 128}, {(7168, 16384), (4096, 7168)}

E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def dequantize(codes, scales, ts):
    """w^ [N, K] in fp32 from the codes as stored (uint8 [N, K / 2]) and the e4m3fn scales."""
    table = torch.tensor(E2M1, device=codes.device)
    nib = torch.stack([codes & 15, codes >> 4], dim=-1).view(codes.shape[0], -1).long()
    s = scales.view(torch.float8_e4m3fn).float().repeat_interleave(16, dim=1)
    return table[nib] * s * ts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", required=True, help="append one JSON line per result to FILE")
    ap.add_argument("--quick", action="store_true", help="six shapes")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--ms", help="comma-separated M values instead of the default list")
    args = ap.parse_args()
    dev, name, commit, flush, ctx, reps, copy_gbps = gpu_setup(args.reps)

    with open(args.jsonl, "a") as out:
        for n, k in NK:
            if args.quick and not args.ms and (n, k) not in QUICK_NK:
                continue
            g = torch.Generator(device=dev).manual_seed(n + k)
            w = torch.randn(n, k, device=dev, generator=g)
            ts = (w.abs().max() / (6 * 448)).reshape(1)
            codes = torch.empty(n, k // 2, dtype=torch.uint8, device=dev)
            packed = torch.empty_like(codes)
            scales = torch.empty(n, k // 16, dtype=torch.uint8, device=dev)
            ctx.quant_nvfp4(w, ts, qfuse.view(codes, "e2m1x2"), qfuse.view(scales, "e4m3fn"))
            ctx.nvfp4_pack(qfuse.view(codes, "e2m1x2"), qfuse.view(packed, "e2m1x2"))
            w_bf16 = dequantize(codes, scales, ts).to(torch.bfloat16)  # exact: code * scale has <= 5 bits
            del w
            for m in [int(v) for v in args.ms.split(",")] if args.ms else MS:
                if args.quick and m not in QUICK_M:
                    continue
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=g)
                d = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
                fn = lambda: ctx.gemm_nvfp4(a, qfuse.view(packed, "e2m1x2"), qfuse.view(scales, "e4m3fn"), ts, d)  # noqa: E731
                us = time_us_named(fn, reps, flush, "nvfp4")
                nbytes = n * k // 2 + n * k // 16 + 2 * m * k + 2 * m * n
                flops = 2 * m * n * k
                floor_us = nbytes / (copy_gbps * 1e3)
                shape = f"M={m},N={n},K={k}"
                base = dict(op="gemm_nvfp4", variant="bf16", shape=shape, device=name, commit=commit, backend="qfuse",
                            flush="read", timing="kernel", us=round(us, 3), gbps=round(nbytes / (us * 1e3), 1),
                            tflops=round(flops / (us * 1e6), 1), pct_floor=round(100 * floor_us / us, 1),
                            copy_gbps=round(copy_gbps, 1))
                peer_fn = lambda: torch.matmul(a, w_bf16.t())  # noqa: E731
                ref = peer_fn()
                peer_us = time_us(peer_fn, reps, flush, "kernel")
                err = ((d.float() - ref.float()).norm() / ref.float().norm()).item()
                row = dict(base, peer="torch-bf16", peer_us=round(peer_us, 3), ratio=round(peer_us / us, 3), rel_err=err)
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                out.flush()
                print(f"{shape:26s} qfuse {us:8.1f} us {base['pct_floor']:5.1f}% of floor {base['tflops']:6.1f} TFLOPS | "
                      f"bf16 {peer_us:8.1f} us ratio {peer_us / us:5.2f}x (rel. error {err:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
