#!/usr/bin/env python3
"""torch eager and torch.compile peers of qfuse's activation-quantization ops.

Times the same math as qfuse-bench's quant rows, on the same shapes, and appends JSON lines in
qfuse-bench's schema (backend "torch" or "torch.compile"). See bench/peers/README.md.
Usage: quant_torch.py --jsonl FILE [--quick] [--only OPS] [--reps N] [--budget S] [--flush read|memset]
                      [--timing kernel|event]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
SCALE_MIN = 1e-10
EPS = 1e-6
WARMUP = 5


def qmax(qdtype):
    return 127.0 if qdtype == torch.int8 else 448.0


def encode(v, qdtype):
    """Round to nearest even and saturate, as qfuse does (torch's fp8 cast does not saturate)."""
    if qdtype == torch.int8:
        return v.round().clamp(-128, 127).to(torch.int8)
    return v.clamp(-448.0, 448.0).to(FP8)


def pad4(m):
    return (m + 3) // 4 * 4


def group_scales_out(s, layout, fmt):
    """s [M, KG] fp32 -> the stored scales: row_major [M, KG]; col_major_tma [KG, Mp] zero-padded;
    ue8m0_packed int32 [ceil(KG / 4), Mp], exponent byte of group 4j+i in byte i of word j."""
    m, kg = s.shape
    if layout == "row_major":
        return s
    if fmt == "f32":
        return F.pad(s.t(), (0, pad4(m) - m)).contiguous()
    e = (s.view(torch.int32) >> 23).to(torch.int64)
    e = F.pad(e, (0, (-kg) % 4)).view(m, -1, 4)
    shifts = torch.tensor([0, 8, 16, 24], device=s.device, dtype=torch.int64)
    words = (e << shifts).sum(-1).to(torch.int32)
    return F.pad(words.t(), (0, pad4(m) - m)).contiguous()


def group_quant(v, group, qdtype, layout, fmt):
    """v [M, K] fp32 -> q [M, K], stored scales."""
    m, k = v.shape
    vg = v.view(m, k // group, group)
    s = (vg.abs().amax(-1) / qmax(qdtype)).clamp(min=SCALE_MIN)
    if fmt == "ue8m0_packed":  # round up to a power of two, on the bits
        bits = s.view(torch.int32)
        s = (((bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)) << 23).view(torch.float32)
    q = encode(vg * (1.0 / s).unsqueeze(-1), qdtype).view(m, k)
    return q, group_scales_out(s, layout, fmt)


def token_quant(v, qdtype):
    s = (v.abs().amax(-1, keepdim=True) / qmax(qdtype)).clamp(min=SCALE_MIN)
    return encode(v * (1.0 / s), qdtype), s.view(-1)


# ---- the ops: each takes the inputs built by make_inputs and the case's constants ----

def quant_per_tensor(x, scale):
    return encode(x.float() * (1.0 / scale), FP8)


def quant_group(x, group, qdtype, layout, fmt):
    return group_quant(x.float(), group, qdtype, layout, fmt)


def silu_mul_quant_group(x, group, qdtype, layout, fmt):
    h = x.shape[1] // 2
    g, u = x[:, :h].float(), x[:, h:].float()
    return group_quant(F.silu(g) * u, group, qdtype, layout, fmt)


def rms_norm_quant(x, residual, weight, group, qdtype, layout, fmt):
    y = x + residual  # the new residual, rounded to bf16 as qfuse stores it
    yf = y.float()
    v = yf * torch.rsqrt(yf.square().mean(-1, keepdim=True) + EPS) * weight.float()
    if group < 0:
        return token_quant(v, qdtype) + (y,)
    return group_quant(v, group, qdtype, layout, fmt) + (y,)


def quant_token(x, qdtype):
    return token_quant(x.float(), qdtype)


def quant_token_azp(x):
    xf = x.float()
    lo, hi = torch.aminmax(xf, dim=-1, keepdim=True)
    s = ((hi - lo) / 255.0).clamp(min=SCALE_MIN)
    inv = 1.0 / s
    azp = (-128.0 - lo * inv).round().clamp(-128, 127)
    q = ((xf * inv).round() + azp).clamp(-128, 127).to(torch.int8)
    return q, s.view(-1), azp.to(torch.int32).view(-1)


def quant_tensor_dynamic(x):
    s = (x.abs().amax().float() / 448.0).clamp(min=SCALE_MIN)
    return encode(x.float() * (1.0 / s), FP8), s.view(1)


# op, variant (as qfuse-bench names it), function, constants, largest M only
E4M3, I8 = FP8, torch.int8
CASES = [
    ("quant_per_tensor", "bf16->e4m3fn", quant_per_tensor, {}, False),
    ("quant_group", "bf16->e4m3fn,g128,col_major_tma", quant_group,
     dict(group=128, qdtype=E4M3, layout="col_major_tma", fmt="f32"), False),
    ("quant_group", "bf16->e4m3fn,g128,row_major", quant_group,
     dict(group=128, qdtype=E4M3, layout="row_major", fmt="f32"), True),
    ("quant_group", "bf16->e4m3fn,g128,ue8m0_packed", quant_group,
     dict(group=128, qdtype=E4M3, layout="col_major_tma", fmt="ue8m0_packed"), True),
    ("silu_mul_quant_group", "bf16->e4m3fn,g128,col_major_tma", silu_mul_quant_group,
     dict(group=128, qdtype=E4M3, layout="col_major_tma", fmt="f32"), False),
    ("silu_mul_quant_group", "bf16->int8,g64,row_major", silu_mul_quant_group,
     dict(group=64, qdtype=I8, layout="row_major", fmt="f32"), True),
    ("rms_norm_quant", "bf16+res->e4m3fn,g128,col_major_tma", rms_norm_quant,
     dict(group=128, qdtype=E4M3, layout="col_major_tma", fmt="f32"), False),
    ("rms_norm_quant", "bf16+res->e4m3fn,token", rms_norm_quant,
     dict(group=-1, qdtype=E4M3, layout="", fmt=""), False),
    ("quant_token", "bf16->e4m3fn", quant_token, dict(qdtype=E4M3), False),
    ("quant_token", "bf16->int8,azp", quant_token_azp, {}, False),
    ("quant_tensor_dynamic", "bf16->e4m3fn", quant_tensor_dynamic, {}, False),
]


def effective_bytes(op, variant, kw, m, k):
    """Inputs read once + outputs written once, as qfuse-bench's effective_bytes."""
    mk = m * k
    group = kw.get("group", -1 if op == "quant_token" else 0)
    if group < 0:
        scales = 4 * m
    elif group == 0:
        scales = 4 if op == "quant_tensor_dynamic" else 0
    elif kw["fmt"] == "ue8m0_packed":
        scales = 4 * ((k // group + 3) // 4) * pad4(m)
    else:
        scales = 4 * (k // group) * (pad4(m) if kw["layout"] == "col_major_tma" else m)
    inp = {"silu_mul_quant_group": 4 * mk, "rms_norm_quant": 4 * mk + 2 * k}.get(op, 2 * mk)
    out = mk + scales + (2 * mk if op == "rms_norm_quant" else 0) + (4 * m if variant.endswith(",azp") else 0)
    return inp + out


def make_inputs(op, pool, m, k):
    if op == "silu_mul_quant_group":
        return (pool["x"][: m * 2 * k].view(m, 2 * k),)
    x = pool["x"][: m * k].view(m, k)
    if op == "rms_norm_quant":
        return (x, pool["res"][: m * k].view(m, k), pool["w"][:k])
    if op == "quant_per_tensor":
        return (x, pool["scale"])
    return (x,)


def time_us(fn, reps, flush, timing):
    """Median of reps runs after WARMUP, L2 flushed (flush()) before each run. timing "kernel": the
    device time of the kernels each run launched (torch.profiler, the CUPTI records qfuse-bench
    reads too; the flush finishes before a run starts); "event": CUDA events around each run."""
    for _ in range(WARMUP):
        flush()
        fn()
    torch.cuda.synchronize()
    times = []
    if timing == "kernel":
        from torch.profiler import ProfilerActivity, profile, record_function
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                flush()
                torch.cuda.synchronize()
                with record_function("qfb_run"):
                    fn()
                torch.cuda.synchronize()
        for e in prof.events():
            # the range itself (a CPU event: its device time adds up the kernels launched in it),
            # not the copy of it on the GPU's timeline
            if e.name == "qfb_run" and e.device_type == torch.autograd.DeviceType.CPU:
                us = getattr(e, "device_time_total", None)
                times.append(e.cuda_time_total if us is None else us)
        if len(times) != reps or min(times) <= 0:
            raise RuntimeError(f"the profiler gave {len(times)} run times for {reps} runs: {times[:4]}")
        return statistics.median(times)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def raise_recompile_limits():
    # one compiled function per op recompiles for every shape and variant (dynamic=False)
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 100000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", required=True, help="append one JSON line per result to FILE")
    ap.add_argument("--quick", action="store_true", help="M in {128, 4096, 16384} x H in {7168, 18432}")
    ap.add_argument("--only", help="comma-separated op names")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per measurement (at least 20)")
    ap.add_argument("--flush", choices=("read", "memset"), default="read",
                    help="empty the L2 before each run by reading a buffer of 2x its size (leaves clean "
                         "lines, as qfuse-bench does by default) or by zeroing it (leaves dirty lines)")
    ap.add_argument("--timing", choices=("kernel", "event"), default="kernel",
                    help="a run's time: its kernels' device time (torch.profiler; as qfuse-bench's default) "
                         "or CUDA events around it")
    ap.add_argument("--budget", type=float, default=330.0,
                    help="seconds after which no new torch.compile shape is compiled (eager rows go on)")
    args = ap.parse_args()
    reps = max(args.reps, 20)
    ms = [128, 4096, 16384] if args.quick else [1, 16, 128, 4096, 16384]
    ks = [7168, 18432] if args.quick else [2048, 7168, 18432]
    only = set(args.only.split(",")) if args.only else None
    cases = [c for c in CASES if not only or c[0] in only]
    if not cases:
        sys.exit(f"quant_torch.py: --only {args.only} matches no op")

    t_begin = time.monotonic()
    raise_recompile_limits()
    dev = torch.device("cuda")
    device_name = torch.cuda.get_device_name(dev)
    commit = os.environ.get("QF_COMMIT", "unknown")
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
    flush_buf = torch.zeros(max(2 * l2, int(120e6)), dtype=torch.int8, device=dev)
    flush = (lambda: flush_buf.sum(dtype=torch.int32)) if args.flush == "read" else flush_buf.zero_
    gen = torch.Generator(device=dev).manual_seed(0)
    m_max, k_max = ms[-1], ks[-1]
    pool = {
        "x": (torch.rand(m_max * 2 * k_max, generator=gen, device=dev) * 8 - 4).to(torch.bfloat16),
        "res": (torch.rand(m_max * k_max, generator=gen, device=dev) * 8 - 4).to(torch.bfloat16),
        "w": (torch.rand(k_max, generator=gen, device=dev) + 0.5).to(torch.bfloat16),
        "scale": torch.tensor([8.0 / 448.0], device=dev),
    }
    compiled = {fn: torch.compile(fn, dynamic=False) for fn in {c[2] for c in cases}}

    compile_s, rows, skipped = 0.0, 0, 0
    with open(args.jsonl, "a") as out:
        def emit(op, variant, shape, backend, us, nbytes):
            nonlocal rows
            row = dict(op=op, variant=variant, shape=shape, device=device_name, commit=commit,
                       backend=backend, flush=args.flush, timing=args.timing, us=round(us, 4), gbps=round(nbytes / (us * 1e3), 3), tflops=None,
                       pct_floor=None, peer=None, peer_us=None, ratio=None)
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
            out.flush()
            rows += 1
            print(f"{op:22s} {variant:38s} {shape:16s} {backend:14s} {us:10.2f} us {row['gbps']:8.1f} GB/s",
                  flush=True)

        for op, variant, fn, kw, largest_m_only in cases:
            for m in ms[-1:] if largest_m_only else ms:
                for k in ks:
                    shape = f"M={m},{'H' if op == 'silu_mul_quant_group' else 'K'}={k}"
                    inputs = make_inputs(op, pool, m, k)
                    nbytes = effective_bytes(op, variant, kw, m, k)
                    emit(op, variant, shape, "torch", time_us(lambda: fn(*inputs, **kw), reps, flush, args.timing), nbytes)
                    if time.monotonic() - t_begin > args.budget:
                        skipped += 1
                        continue
                    cfn = compiled[fn]
                    try:
                        t0 = time.monotonic()
                        cfn(*inputs, **kw)
                        torch.cuda.synchronize()
                        compile_s += time.monotonic() - t0
                        us = time_us(lambda: cfn(*inputs, **kw), reps, flush, args.timing)
                    except Exception as e:  # report and go on with the other shapes
                        print(f"torch.compile {op} {variant} {shape}: {type(e).__name__}: {e}", file=sys.stderr)
                        continue
                    emit(op, variant, shape, "torch.compile", us, nbytes)
    print(f"quant_torch.py: {rows} rows in {time.monotonic() - t_begin:.0f} s "
          f"(first calls of torch.compile: {compile_s:.0f} s; {skipped} compile rows skipped over --budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
