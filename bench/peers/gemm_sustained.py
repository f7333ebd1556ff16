"""The block-scaled GEMM under sustained load: back-to-back calls, no L2 flush, for seconds at a
time, with the GPU's SM clock and power sampled by nvidia-smi. qfuse-bench times single calls
after a flush, between which the GPU idles; an engine's prefill runs GEMMs back to back at the
board's power limit. Peers on the same inputs: cuBLASLt's block-scaled FP8 GEMM (1 x 128 and
128 x 128 scales, through torch._scaled_mm; its D is checked against qfuse's) and its plain FP8
GEMM with per-tensor scales (the FP8 ceiling).

Usage: QFUSE_LIBRARY=build/libqfuse.so python3 bench/peers/gemm_sustained.py [--seconds S] [OUT]

Each (shape, kernel) phase runs S seconds (default 4), twice, in the order qfuse, block-scaled,
plain, qfuse, block-scaled, plain; a phase's line gives its TFLOPS (calls x FLOPs over the wall
time) and the median SM clock and power of the samples inside it. OUT (default .) receives the
samples (smi.csv).
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qfuse  # noqa: E402

SHAPES = [(4096, 7168, 16384), (4096, 32768, 512), (4096, 24576, 1536)]


def run_for(fn, seconds):
    """Calls fn in batches of 20 until `seconds` have passed: (calls, start, end)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n += 20
    return n, t0, time.time()


def samples(path):
    """(time, SM MHz, W) rows of the sampler's file."""
    rows = []
    for line in open(path):
        p = [x.strip() for x in line.split(",")]
        try:
            rows.append((datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(p[1]), float(p[2])))
        except (ValueError, IndexError):
            pass
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("out", nargs="?", default=".")
    args = ap.parse_args()
    ctx = qfuse.Context("cuda:0")
    smi_path = os.path.join(args.out, "smi.csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=open(smi_path, "w"))
    print(f"{torch.cuda.get_device_name(0)}, qfuse {qfuse.version()}, torch {torch.__version__}", flush=True)
    phases = []
    torch.manual_seed(0)
    for M, N, K in SHAPES:
        kb, mp = (K + 127) // 128, (M + 3) // 4 * 4
        a = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        a_s = torch.rand(kb, mp, device="cuda") + 0.5  # column-major [K/128, Mp], as qf_quant_group writes it
        b_s = torch.rand((N + 127) // 128, kb, device="cuda") + 0.5
        d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        one = torch.ones((), device="cuda")
        av, bv = qfuse.view(a.view(torch.uint8), "e4m3fn"), qfuse.view(b.view(torch.uint8), "e4m3fn")
        kernels = [
            ("qfuse", lambda: ctx.gemm_fp8_blockscale(av, a_s[:, :M], bv, b_s, d)),
            # scale_a [M, K/128] with M contiguous, scale_b [K/128, N/128]: the same scales
            ("cublaslt_blk", lambda: torch._scaled_mm(a, b.t(), scale_a=a_s[:, :M].t(), scale_b=b_s.t(),
                                                      out_dtype=torch.bfloat16)),
            ("cublaslt_fp8", lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
        ]
        ref = kernels[1][1]()
        kernels[0][1]()
        torch.cuda.synchronize()
        err = ((ref.float() - d.float()).norm() / ref.float().norm()).item()
        print(f"({M}, {N}, {K}): block-scaled D of cuBLASLt and qfuse differ by {err:.1e} (relative Frobenius)", flush=True)
        if not err < 1e-2:
            raise SystemExit("the block-scaled peer does not compute qfuse's GEMM")
        for name, fn in kernels + kernels:
            time.sleep(1.0)  # (each phase starts from the same idle state)
            n, t0, t1 = run_for(fn, args.seconds)
            phases.append((name, (M, N, K), n, t0, t1))
    time.sleep(0.5)
    smi.terminate()
    smi.wait()
    rows = samples(smi_path)
    for name, (M, N, K), n, t0, t1 in phases:
        s = [r for r in rows if t0 + 0.5 <= r[0] <= t1 - 0.2]
        tflops = 2.0 * M * N * K * n / (t1 - t0) / 1e12
        if not s:
            print(f"{name:13s} ({M}, {N}, {K}): {tflops:.0f} TFLOPS, no clock samples")
            continue
        print(f"{name:13s} ({M}, {N}, {K}): {tflops:5.0f} TFLOPS, SM clock median "
              f"{statistics.median(r[1] for r in s):.0f} MHz, power median {statistics.median(r[2] for r in s):.0f} W "
              f"({len(s)} samples)")


if __name__ == "__main__":
    main()
