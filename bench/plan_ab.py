#!/usr/bin/env python3
"""A change to the block-scaled GEMM's plans, measured where it changes them: the old and the new
plan of each shape forced on the GPU (qf_gemm_fp8_blockscale_with), on the whole device or on a
green-context partition of fewer SMs (another SM count's plans on the same GPU).

  bench/plan_ab.py cases --base TOOL [--plan TOOL] [--sms 132,112,80] [--dram GBPS] [--more] > CASES
  QFUSE_LIBRARY=build/libqfuse.so bench/plan_ab.py run CASES
  bench/plan_ab.py sweep-cases --sms 112 [--plan TOOL] [--dram GBPS] [--m 64,128] [--weights bench|more] > CASES
  QFUSE_LIBRARY=build/libqfuse.so bench/plan_ab.py sweep CASES OUT.jsonl

`cases` runs two builds' qfuse-plan (tools/plan; --plan defaults to build/tools/qfuse-plan) on a
scan of DeepSeek-V3 and Llama weights (37 (N, K); with --more 37 other models' layers too) at 32
values of M from 1 to 8192, at each SM count, and prints "SMS SHAPE OLD NEW" for every shape whose
plan differs. `run` times each line: the L2 flushed by a 120 MiB read before each run, CUDA events
around the call (launch included), the median of 25 runs after 5, in the order old, new, new, old;
it prints both medians of each plan, old / new of the faster ones, and the relative difference of
the two plans' D. An SM count below the device's runs on a partition of that many SMs
(cuDevSmResourceSplitByCount: counts the driver can split, multiples of 8 on Hopper; the line names
the partition's size), whose stream the qfuse context takes (qf_ctx_set_stream), so that the plans
are that SM count's.

`sweep-cases` prints "SMS SHAPE PLAN" with qfuse-plan's plan for each shape of the scan (or of the
bench's six weights, --weights bench, or of other models' layers, --weights more) at the given M;
`sweep` times each shape's public call and every plan qf_gemm_fp8_blockscale_with accepts (the
engine's tiles, unsplit or split 2, 3, 4, 6, 8, 12 or 16 ways or as many as fill the SMs), all in
one order and then in reverse, and writes qfuse-bench's plan rows (op gemm_fp8_blockscale_plans,
variants plan=PLAN and auto=PLAN, the faster of the two medians), which
`bench/plan_eval.py --sms SMS` scores like a sweep of the bench; its lines also say whether the
public call wrote the same D as its plan forced.
"""
import argparse
import ctypes
import os
import statistics
import sys

from plan_eval import picks

WEIGHTS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (1536, 7168),
           (576, 7168), (36864, 7168), (7168, 18432), (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),
           (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (5120, 5120), (1024, 7168), (18432, 7168),
           (512, 7168), (256, 7168), (768, 7168), (3072, 1536), (7168, 1536), (4096, 512), (7168, 4096),
           (2048, 7168), (16384, 7168), (14336, 4096), (11008, 4096), (4096, 11008), (22016, 8192), (8192, 22016),
           (1280, 8192), (8192, 1024)]
MS = [1, 8, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256, 288, 320, 384, 448, 512, 576, 640, 768, 896,
      1024, 1536, 2048, 2560, 3072, 3584, 4096, 8192]
# Dense layers of other models' FP8 checkpoints (QKV and gate-up fused), swept off the scan (docs/GEMM.md,
# "Weights off the scan"): Qwen3-4B / 8B / 32B, Gemma-2-9B / 27B, Qwen2.5-72B, Phi-4, Mistral-Small-24B,
# Llama-3.2-1B / 3B.
MORE_WEIGHTS = [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728), (24576, 4096), (12288, 4096),
                (4096, 12288), (10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600), (8192, 3584), (3584, 4096),
                (28672, 3584), (3584, 14336), (8192, 4608), (4608, 4096), (73728, 4608), (4608, 36864),
                (59136, 8192), (8192, 29568), (29568, 8192), (7680, 5120), (35840, 5120), (5120, 17920),
                (6144, 5120), (5120, 4096), (65536, 5120), (5120, 32768), (3072, 2048), (2048, 2048), (16384, 2048),
                (2048, 8192), (5120, 3072), (3072, 3072), (16384, 3072), (3072, 8192)]


def cases(args):
    shapes = [f"M={m},N={n},K={k}" for n, k in WEIGHTS + (MORE_WEIGHTS if args.more else []) for m in MS]
    for sms in (int(s) for s in args.sms.split(",")):
        olds, news = picks(args.base, shapes, sms, args.dram), picks(args.plan, shapes, sms, args.dram)
        for shape in shapes:
            old, new = olds[shape], news[shape]
            if old == new:
                continue
            if "+" in old + new:  # a round of owners and helpers: not a plan qf_gemm_fp8_blockscale_with takes
                print(f"plan_ab: {sms} SMs {shape} {old} -> {new} cannot be forced, left out", file=sys.stderr)
            else:
                print(sms, shape, old, new)


def sweep_cases(args):
    weights = {"bench": WEIGHTS[:6], "scan": WEIGHTS, "more": MORE_WEIGHTS}[args.weights]
    ms = [int(m) for m in args.m.split(",")] if args.m else MS
    shapes = [f"M={m},N={n},K={k}" for n, k in weights for m in ms]
    for sms in (int(s) for s in args.sms.split(",")):
        for shape, plan in picks(args.plan, shapes, sms, args.dram).items():
            print(sms, shape, plan)


def green_stream(sms):
    """A stream on a green-context partition of at least sms SMs, and the partition's size."""
    cu = ctypes.CDLL("libcuda.so.1")

    def ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUresult {rc}")
    dev = ctypes.c_int()
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    whole, part, rest = (ctypes.create_string_buffer(144) for _ in range(3))  # CUdevResource
    ok(cu.cuDeviceGetDevResource(dev, whole, 1), "cuDeviceGetDevResource")  # CU_DEV_RESOURCE_TYPE_SM
    groups = ctypes.c_uint(1)
    ok(cu.cuDevSmResourceSplitByCount(part, ctypes.byref(groups), whole, rest, 0, sms), "cuDevSmResourceSplitByCount")
    desc, green, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuDevResourceGenerateDesc(ctypes.byref(desc), part, 1), "cuDevResourceGenerateDesc")
    ok(cu.cuGreenCtxCreate(ctypes.byref(green), desc, dev, 1), "cuGreenCtxCreate")  # CU_GREEN_CTX_DEFAULT_STREAM
    ok(cu.cuGreenCtxStreamCreate(ctypes.byref(stream), green, 1, 0), "cuGreenCtxStreamCreate")  # non-blocking
    return stream.value, int.from_bytes(part.raw[96:100], "little")  # CUdevResource.sm.smCount


def gpu_shapes(lines):
    """For each line "SMS SHAPE ...": the SM count's stream and a qfuse context on it, the shape's
    operands, and (got, fields, force(plan), public(), median_us(fn), d) inside that stream."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import qfuse
    from qfuse import _Arg, _lib

    torch.zeros(1, device="cuda")
    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    streams = {}
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        sms, shape = int(fields[0]), fields[1]
        if sms not in streams:
            if sms < device_sms:
                handle, got = green_stream(sms)
                streams[sms] = torch.cuda.ExternalStream(handle), got
            else:
                streams[sms] = torch.cuda.current_stream(), device_sms
        stream, got = streams[sms]
        ctx = qfuse.Context("cuda:0")
        ctx.set_stream(stream.cuda_stream)
        with torch.cuda.stream(stream):
            M, N, K = (int(x.split("=")[1]) for x in shape.split(","))
            kb = (K + 127) // 128
            flush = torch.empty(120 << 20, dtype=torch.uint8, device="cuda")
            a = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
            b = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
            a_s = torch.rand(kb, (M + 3) // 4 * 4, device="cuda") + 0.5
            b_s = torch.rand((N + 127) // 128, kb, device="cuda") + 0.5
            d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            stream.synchronize()
            A, B = qfuse.view(a.view(torch.uint8), "e4m3fn"), qfuse.view(b.view(torch.uint8), "e4m3fn")
            keep = [_Arg(A), _Arg(a_s[:, :M]), _Arg(B), _Arg(b_s), _Arg(d)]

            def force(plan):
                """The plan forced; False where the library has no such plan for the shape."""
                tile, splits = plan.split("/")
                bm, bn = tile.split("x")
                return _lib.qf_gemm_fp8_blockscale_with(ctx._ctx, *(x.ptr() for x in keep), None, int(bm), int(bn),
                                                        int(splits)) == 0

            def public():
                ctx.gemm_fp8_blockscale(A, a_s[:, :M], B, b_s, d)
                return True

            def median_us(fn):
                times = []
                for i in range(30):
                    flush.sum(dtype=torch.int64)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(stream)
                    if not fn():
                        raise RuntimeError(f"{shape} on {got} SMs: {_lib.qf_ctx_last_error(ctx._ctx).decode()}")
                    e1.record(stream)
                    e1.synchronize()
                    if i >= 5:
                        times.append(e0.elapsed_time(e1) * 1e3)
                return statistics.median(times)
            yield got, fields, force, public, median_us, d


def run(args):
    for got, (_, shape, old, new), force, _, median_us, d in gpu_shapes(open(args.cases)):
        outs = []
        for plan in (old, new):
            if not force(plan):
                raise RuntimeError(f"{shape} {plan} on {got} SMs: not a plan of the library")
            outs.append(d.float())
        diff = ((outs[0] - outs[1]).norm() / outs[0].norm()).item()
        o1, n1 = median_us(lambda: force(old)), median_us(lambda: force(new))
        n2, o2 = median_us(lambda: force(new)), median_us(lambda: force(old))
        print(f"{got:4d} SMs {shape:24s} {old:>14s} {o1:8.2f} {o2:8.2f}  {new:>14s} {n1:8.2f} {n2:8.2f}  "
              f"old/new {min(o1, o2) / min(n1, n2):.3f}  (D differ {diff:.1e})", flush=True)


def sweep(args):
    import json
    import torch
    tiles = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 192), (192, 128), (256, 128)]
    with open(args.out, "w") as out:
        for got, (_, shape, auto), force, public, median_us, d in gpu_shapes(open(args.cases)):
            M, N, K = (int(x.split("=")[1]) for x in shape.split(","))
            # the public call's D against its plan forced: the same plan, the same bytes
            same = "-"
            if "+" not in auto:
                public()
                ref = d.clone()
                force(auto)
                same = "same D" if bool((d.view(-1).view(torch.int16) == ref.view(-1).view(torch.int16)).all()) else "D DIFFERS"
            candidates = []
            for bm, bn in tiles:
                t = ((M + bm - 1) // bm) * ((N + bn - 1) // bn)
                rem = t if t < got else t % got
                for sp in sorted({1, 2, 3, 4, 6, 8, 12, 16, got // rem if rem else 1}):
                    if force(f"{bm}x{bn}/{sp}"):
                        candidates.append(f"{bm}x{bn}/{sp}")
            fns = [(f"auto={auto}", public)] + [(f"plan={p}", (lambda p=p: force(p))) for p in candidates]
            first = {v: median_us(fn) for v, fn in fns}
            best = {v: min(first[v], median_us(fn)) for v, fn in reversed(fns)}
            for v, us in best.items():
                out.write(json.dumps({"op": "gemm_fp8_blockscale_plans", "variant": v, "shape": shape, "us": round(us, 3),
                                      "sms": got}) + "\n")
            out.flush()  # the rows so far survive a run cut short
            fastest = min((us, v) for v, us in best.items() if v.startswith("plan="))
            print(f"{got:4d} SMs {shape:24s} auto {auto} {best[f'auto={auto}']:.2f} us, fastest {fastest[1][5:]} "
                  f"{fastest[0]:.2f} us ({len(candidates)} plans; public call and its plan forced: {same})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cases")
    c.add_argument("--base", required=True)
    c.add_argument("--plan", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "tools", "qfuse-plan"))
    c.add_argument("--sms", default="132")
    c.add_argument("--dram", default="4800")
    c.add_argument("--more", action="store_true", help="the other models' layers too (MORE_WEIGHTS)")
    r = sub.add_parser("run")
    r.add_argument("cases")
    sc = sub.add_parser("sweep-cases")
    sc.add_argument("--plan", default=c.get_default("plan"))
    sc.add_argument("--sms", default="132")
    sc.add_argument("--dram", default="4800")
    sc.add_argument("--m", default="")
    sc.add_argument("--weights", choices=["scan", "bench", "more"], default="scan")
    sw = sub.add_parser("sweep")
    sw.add_argument("cases")
    sw.add_argument("out")
    args = parser.parse_args()
    {"cases": cases, "run": run, "sweep-cases": sweep_cases, "sweep": sweep}[args.what](args)


if __name__ == "__main__":
    main()
