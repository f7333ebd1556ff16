#!/usr/bin/env python3
"""qf_attention against torch's scaled_dot_product_attention backends, in one process.

Times qfuse (through the Python binding, on the same torch tensors) and each SDPA backend that
takes the shape (flash, cuDNN, memory-efficient) with the timing of quant_torch.py (kernel time
from torch.profiler, L2 flushed by a read pass before each run), and appends JSON lines in
qfuse-bench's schema: one row per peer with peer_us and ratio = peer_us / us. See
bench/peers/README.md.
Packed sequences (qf_attention_varlen, variant "varlen"): a batch of prompts of different lengths
against torch's FlashAttention-2 varlen forward (aten._flash_attention_forward on the same packed
tensors) and SDPA on nested jagged tensors where a backend takes them; "paged,varlen"
(qf_attention_paged_varlen, 16-key pages shuffled) against the same call on contiguous keys.
FP8 keys and values (variant "fp8kv"): e4m3fn caches with a scale per kv head against qfuse's bf16
call and SDPA's backends on the bf16 keys those codes stand for (what an engine saves by storing
its cache in FP8), and against the memory floor of the FP8 bytes.
Usage: attention_torch.py --jsonl FILE [--quick] [--reps N] [--only dense|varlen|fp8]
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import qfuse
from quant_torch import WARMUP, time_us

BACKENDS = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
            "torch-efficient": SDPBackend.EFFICIENT_ATTENTION}

# (name, B, Sq, Skv, Hq, Hkv, D, causal[, Dv]): prefill at Sq = Skv, decode at Sq = 1 (every key visible);
# "paged": qfuse reads the keys through a block table of 16-key pages (shuffled), the peers the same
# keys contiguous.
SHAPES = [
    ("prefill", 8, 1024, 1024, 32, 8, 128, True),
    ("prefill", 2, 4096, 4096, 32, 8, 128, True),
    ("prefill", 2, 4096, 4096, 32, 8, 128, False),
    ("prefill", 4, 2048, 2048, 16, 16, 64, True),
    ("prefill", 2, 2048, 2048, 16, 8, 256, True),
    ("decode", 1, 1, 8192, 32, 8, 128, False),
    ("decode", 8, 1, 4096, 32, 32, 128, False),
    ("decode", 32, 1, 2048, 32, 8, 128, False),
    ("decode", 8, 1, 16384, 64, 8, 128, False),
    ("paged", 32, 1, 2048, 32, 8, 128, False),
    # MLA's prefill head dims (DeepSeek-V3 without the absorbed weights, 16 of the 128 heads): q and k
    # 192, v and o 128 (the last element)
    ("prefill", 1, 4096, 4096, 16, 16, 192, True, 128),
    ("prefill", 4, 1024, 1024, 16, 16, 192, True, 128),
]
QUICK = {0, 2, 5, 6}

# FP8 keys and values (name, B, Sq, Skv, Hq, Hkv, D, causal): decode steps over dense and paged (16-key
# pages) caches, and a chunk of prompt over an FP8 cache (the decode kernel runs it).
FP8 = [
    ("decode", 1, 1, 8192, 32, 8, 128, False),
    ("decode", 8, 1, 4096, 32, 32, 128, False),
    ("decode", 32, 1, 2048, 32, 8, 128, False),
    ("decode", 8, 1, 16384, 64, 8, 128, False),
    ("paged", 32, 1, 2048, 32, 8, 128, False),
    ("decode", 32, 4, 2048, 32, 8, 128, True),
    ("prefill", 2, 1024, 4096, 32, 8, 128, True),
]

# Cache appends (new tokens, Hkv, D): a decode step of 32 sequences, a prefill chunk.
APPEND = [(32, 8, 128), (8192, 8, 128)]

# Packed prefill batches (name, prompt lengths, Hq, Hkv, D), causal: each prompt's queries are its keys.
VARLEN = [
    ("varlen", [4096, 1024, 2500, 300, 77, 3000, 1500, 700, 2048, 129, 900, 3700, 64, 1800, 2222, 1], 32, 8, 128),
    ("varlen", [512, 200, 1000, 37, 800, 640, 333, 999], 32, 32, 128),
]


def time_us_named(fn, reps, flush, name):
    """Median kernel time of reps runs of fn after WARMUP, L2 flushed before each, from the
    profiler's records of the kernels whose name contains `name`. libqfuse launches through its own
    CUDA runtime, so torch.profiler records its kernels but does not attribute them to a range (the
    range-based time_us reads 0): a run is each unbroken sequence of such kernels between flushes."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(WARMUP):
        flush()
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    runs, cur = [], None
    for e in kernels:
        if name in e.name:
            cur = (cur or 0.0) + e.time_range.elapsed_us()
        elif cur is not None:
            runs.append(cur)
            cur = None
    if cur is not None:
        runs.append(cur)
    if len(runs) != reps:
        raise RuntimeError(f"found {len(runs)} runs of '{name}' kernels for {reps} runs")
    return statistics.median(runs)


def gpu_setup(reps):
    """What a script timing qfuse and torch in one process needs: the device, its name, the commit
    (QF_COMMIT), an L2 flush (a read pass over twice the L2), a qfuse context on torch's stream,
    the repetitions (at least 20) and this run's copy bandwidth (1 GiB read and written by
    torch's copy kernel), in GB/s."""
    dev = torch.device("cuda")
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
    flush_buf = torch.zeros(max(2 * l2, int(120e6)), dtype=torch.int8, device=dev)
    flush = lambda: flush_buf.sum(dtype=torch.int32)  # noqa: E731
    ctx = qfuse.Context("cuda")
    ctx.set_stream(torch.cuda.current_stream().cuda_stream)
    reps = max(reps, 20)
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device=dev)
    dst = torch.empty_like(src)
    copy_gbps = 2 * src.numel() * 2 / (time_us(lambda: dst.copy_(src), reps, flush, "kernel") * 1e3)
    del src, dst
    print(f"copy ceiling {copy_gbps:.0f} GB/s")
    return dev, torch.cuda.get_device_name(dev), os.environ.get("QF_COMMIT", "unknown"), flush, ctx, reps, copy_gbps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", required=True, help="append one JSON line per result to FILE")
    ap.add_argument("--quick", action="store_true", help="four shapes")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", choices=("dense", "varlen", "fp8"), help="the dense shapes, the packed batches or the FP8 caches alone")
    args = ap.parse_args()
    dev, name, commit, flush, ctx, reps, copy_gbps = gpu_setup(args.reps)

    with open(args.jsonl, "a") as out:
        for i, (kind, b, sq, skv, hq, hkv, d, causal, *dv) in enumerate(SHAPES):
            if (args.quick and i not in QUICK) or args.only in ("varlen", "fp8"):
                continue
            dv = dv[0] if dv else d
            g = torch.Generator(device=dev).manual_seed(i)
            q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16, generator=g)
            k = torch.randn(b, skv, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
            v = torch.randn(b, skv, hkv, dv, device=dev, dtype=torch.bfloat16, generator=g)
            o = torch.empty(b, sq, hq, dv, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, hq, sq, device=dev)
            if kind == "paged":
                page = 16
                perm = torch.randperm(b * skv // page, device=dev, generator=g)
                table = perm.view(b, skv // page).to(torch.int32)
                k_cache = torch.empty(b * skv // page, page, hkv, d, device=dev, dtype=torch.bfloat16)
                v_cache = torch.empty_like(k_cache)
                k_cache[perm] = k.view(-1, page, hkv, d)
                v_cache[perm] = v.view(-1, page, hkv, d)
                lens = torch.full((b,), skv, dtype=torch.int32, device=dev)
                fn = lambda: ctx.attention_paged(q, k_cache, v_cache, table, lens, o, lse=lse)  # noqa: E731
            else:
                fn = lambda: ctx.attention(q, k, v, o, lse=lse, causal=causal)  # noqa: E731
            try:
                us = time_us_named(fn, reps, flush, "attention")
            except qfuse.QfuseError as e:  # a library without this shape's kernels
                print(f"qfuse: not run ({e})")
                continue
            pairs = b * hq * sq * skv * (0.5 if causal and sq == skv else 1.0)
            flops = 2 * pairs * (d + dv)
            nbytes = 2 * (q.numel() + k.numel() + v.numel() + o.numel()) + 4 * lse.numel()
            shape = f"B={b},Sq={sq},Skv={skv},Hq={hq},Hkv={hkv},D={d}" + (f",Dv={dv}" if dv != d else "")
            variant = f"bf16,{kind}{',causal' if causal else ''}"
            floor_us = nbytes / (copy_gbps * 1e3)
            base = dict(op="attention", variant=variant, shape=shape, device=name, commit=commit, backend="qfuse",
                        flush="read", timing="kernel", us=round(us, 3), gbps=round(nbytes / (us * 1e3), 1),
                        tflops=round(flops / (us * 1e6), 1), pct_floor=round(100 * floor_us / us, 1))
            print(f"{variant:22s} {shape:44s} qfuse {us:9.1f} us {base['tflops']:7.1f} TFLOPS "
                  f"{base['pct_floor']:5.1f}% of the memory floor")
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D] views of the same memory
            for peer, backend in BACKENDS.items():
                try:
                    with sdpa_kernel(backend):
                        fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,  # noqa: E731
                                                                    enable_gqa=hkv != hq)
                        ref = fn()
                        peer_us = time_us(fn, reps, flush, "kernel")
                except RuntimeError as e:  # the backend does not take this shape
                    print(f"  {peer}: not run ({str(e).splitlines()[0][:100]})")
                    continue
                err = ((o.float() - ref.transpose(1, 2).float()).norm() / ref.float().norm()).item()
                row = dict(base, peer=peer, peer_us=round(peer_us, 3), ratio=round(peer_us / us, 3), rel_err=err)
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                out.flush()
                print(f"  {peer:16s} {peer_us:9.1f} us  ratio {peer_us / us:5.2f}x  (qfuse vs it: rel. error {err:.1e})")
        for i, (kind, lens, hq, hkv, d) in enumerate(VARLEN):
            if (args.quick and i) or args.only in ("dense", "fp8"):
                continue
            bench_varlen(out, dev, name, commit, flush, ctx, reps, copy_gbps, i, lens, hq, hkv, d)
        for i, shape in enumerate(FP8):
            if (args.quick and i not in (0, 2)) or args.only in ("dense", "varlen"):
                continue
            bench_fp8(out, dev, name, commit, flush, ctx, reps, copy_gbps, i, *shape)
        for i, (tokens, hkv, d) in enumerate(APPEND):
            if (args.quick and i) or args.only in ("dense", "varlen"):
                continue
            for fp8 in (True, False):
                bench_append(out, dev, name, commit, flush, ctx, reps, copy_gbps, i, tokens, hkv, d, fp8)
    return 0


def bench_append(out, dev, name, commit, flush, ctx, reps, copy_gbps, seed, tokens, hkv, d, fp8):
    """qf_attention_cache_append of `tokens` new K and V rows at shuffled slots of a 16-key paged
    cache against torch's composition (scale and convert, then index_put on the slots' rows)."""
    g = torch.Generator(device=dev).manual_seed(300 + seed)
    k, v = (torch.randn(tokens, hkv, d, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
    page, n_pages = 16, max(64, 2 * tokens // 16)
    slots = torch.randperm(n_pages * page, device=dev, generator=g)[:tokens].to(torch.int32)
    k_scale, v_scale = torch.full((hkv,), 0.05, device=dev), torch.full((hkv,), 0.02, device=dev)
    caches = [torch.zeros(n_pages, page, hkv, d, device=dev, dtype=torch.uint8 if fp8 else torch.bfloat16) for _ in range(2)]
    views = [qfuse.view(c, "e4m3fn") for c in caches] if fp8 else caches
    fn = lambda: ctx.attention_cache_append(k, v, slots, views[0], views[1], k_scale=k_scale if fp8 else None,  # noqa: E731
                                            v_scale=v_scale if fp8 else None)
    try:
        us = time_us_named(fn, reps, flush, "cache_append")
    except qfuse.QfuseError as e:
        print(f"qfuse cache append: not run ({e})")
        return
    ours = [c.clone() for c in caches]
    idx = slots.long()

    def peer():
        for x, c, s in ((k, caches[0], k_scale), (v, caches[1], v_scale)):
            if fp8:
                c.view(-1, hkv, d)[idx] = (x.float() * (1.0 / s)[None, :, None]).to(torch.float8_e4m3fn).view(torch.uint8)
            else:
                c.view(-1, hkv, d)[idx] = x
    peer()
    same = all(torch.equal(a, b) for a, b in zip(ours, caches))
    peer_us = time_us(peer, reps, flush, "kernel")
    nbytes = 2 * tokens * hkv * d * (2 + (1 if fp8 else 2)) + 4 * tokens
    shape = f"T={tokens},Hkv={hkv},D={d},page={page}"
    variant = "fp8kv,cache_append" if fp8 else "bf16,cache_append"
    row = dict(op="attention", variant=variant, shape=shape, device=name, commit=commit, backend="qfuse", flush="read",
               timing="kernel", us=round(us, 3), gbps=round(nbytes / (us * 1e3), 1),
               pct_floor=round(100 * nbytes / (copy_gbps * 1e3) / us, 1), peer="torch-index-put",
               peer_us=round(peer_us, 3), ratio=round(peer_us / us, 3), same_bytes=same)
    out.write(json.dumps(row, separators=(",", ":")) + "\n")
    out.flush()
    print(f"{variant:22s} {shape:44s} qfuse {us:8.2f} us {row['pct_floor']:5.1f}% of the floor  torch {peer_us:8.2f} us "
          f"ratio {peer_us / us:5.2f}x  same bytes: {same}")


def bench_fp8(out, dev, name, commit, flush, ctx, reps, copy_gbps, seed, kind, b, sq, skv, hq, hkv, d, causal):
    """qfuse over e4m3fn keys and values (a scale per kv head from each head's absolute maximum)
    against qfuse and SDPA on the bf16 values the codes stand for; "paged": the FP8 cache in
    shuffled 16-key pages, the peers on contiguous keys."""
    g = torch.Generator(device=dev).manual_seed(200 + seed)
    q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16, generator=g)
    kv = [torch.randn(b, skv, hkv, d, device=dev, dtype=torch.float32, generator=g) for _ in range(2)]
    scales = [t.abs().amax(dim=(0, 1, 3)) / 448 for t in kv]  # [Hkv]
    codes = [(t / s[None, None, :, None]).to(torch.float8_e4m3fn) for t, s in zip(kv, scales)]
    k, v = ((c.float() * s[None, None, :, None]).to(torch.bfloat16) for c, s in zip(codes, scales))
    k8, v8 = (qfuse.view(c.view(torch.uint8), "e4m3fn") for c in codes)
    o = torch.empty(b, sq, hq, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(b, hq, sq, device=dev)
    if kind == "paged":
        page = 16
        perm = torch.randperm(b * skv // page, device=dev, generator=g)
        table = perm.view(b, skv // page).to(torch.int32)
        caches = []
        for c in codes:
            cache = torch.empty(b * skv // page, page, hkv, d, device=dev, dtype=torch.uint8)
            cache[perm] = c.view(torch.uint8).view(-1, page, hkv, d)
            caches.append(qfuse.view(cache, "e4m3fn"))
        lens = torch.full((b,), skv, dtype=torch.int32, device=dev)
        fn = lambda: ctx.attention_paged(q, caches[0], caches[1], table, lens, o, lse=lse, causal=causal,  # noqa: E731
                                         k_scale=scales[0], v_scale=scales[1])
    else:
        fn = lambda: ctx.attention(q, k8, v8, o, lse=lse, causal=causal, k_scale=scales[0], v_scale=scales[1])  # noqa: E731
    try:
        us = time_us_named(fn, reps, flush, "attention")
    except qfuse.QfuseError as e:  # a library without FP8 keys
        print(f"qfuse fp8: not run ({e})")
        return
    o_fp8 = o.clone()
    pairs = b * hq * sq * skv if not causal else b * hq * sum(min(skv, skv - sq + i + 1) for i in range(sq))
    flops = 4 * d * pairs
    nbytes = 2 * (q.numel() + o.numel()) + 2 * b * skv * hkv * d + 4 * lse.numel()
    shape = f"B={b},Sq={sq},Skv={skv},Hq={hq},Hkv={hkv},D={d}"
    variant = f"fp8kv,{kind}{',causal' if causal else ''}"
    base = dict(op="attention", variant=variant, shape=shape, device=name, commit=commit, backend="qfuse",
                flush="read", timing="kernel", us=round(us, 3), gbps=round(nbytes / (us * 1e3), 1),
                tflops=round(flops / (us * 1e6), 1), pct_floor=round(100 * nbytes / (copy_gbps * 1e3) / us, 1))
    print(f"{variant:22s} {shape:44s} qfuse {us:9.1f} us {base['tflops']:7.1f} TFLOPS "
          f"{base['pct_floor']:5.1f}% of the memory floor")

    def emit(peer, peer_fn, ref_of, timer):
        try:
            ref = ref_of(peer_fn())
            peer_us = timer(peer_fn)
        except RuntimeError as e:  # the backend does not take this shape
            print(f"  {peer}: not run ({str(e).splitlines()[0][:100]})")
            return
        err = ((o_fp8.float() - ref.float()).norm() / ref.float().norm()).item()
        row = dict(base, peer=peer, peer_us=round(peer_us, 3), ratio=round(peer_us / us, 3), rel_err=err)
        out.write(json.dumps(row, separators=(",", ":")) + "\n")
        out.flush()
        print(f"  {peer:16s} {peer_us:9.1f} us  ratio {peer_us / us:5.2f}x  (qfuse fp8 vs it: rel. error {err:.1e})")

    o16 = torch.empty_like(o)
    emit("qfuse-bf16", lambda: (ctx.attention(q, k, v, o16, lse=lse, causal=causal), o16)[1], lambda r: r,
         lambda f: time_us_named(f, reps, flush, "attention"))
    if causal and 1 < sq < skv:  # SDPA's causal mask is aligned to the first key, qfuse's queries are the last
        return
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for peer, backend in BACKENDS.items():
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal and sq > 1, enable_gqa=hkv != hq)
        emit(peer, sdpa, lambda r: r.transpose(1, 2), lambda f: time_us(f, reps, flush, "kernel"))


def bench_varlen(out, dev, name, commit, flush, ctx, reps, copy_gbps, seed, lens, hq, hkv, d):
    """A packed causal prefill batch: qfuse's varlen call against FlashAttention-2's varlen forward
    and nested-tensor SDPA, then qfuse's paged varlen call (16-key pages) against its dense one."""
    g = torch.Generator(device=dev).manual_seed(100 + seed)
    total = sum(lens)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
    o = torch.empty_like(q)
    lse = torch.empty(hq, total, device=dev)
    mx = max(lens)
    fn = lambda: ctx.attention_varlen(q, k, v, cu, cu, mx, mx, o, lse=lse, causal=True)  # noqa: E731
    us = time_us_named(fn, reps, flush, "attention")
    flops = 4 * d * hq * sum(n * (n + 1) / 2 for n in lens)
    nbytes = 2 * (q.numel() + k.numel() + v.numel() + o.numel()) + 4 * lse.numel()
    shape = f"B={len(lens)},total={total},max={mx},Hq={hq},Hkv={hkv},D={d}"
    base = dict(op="attention", variant="bf16,varlen,causal", shape=shape, device=name, commit=commit, backend="qfuse",
                flush="read", timing="kernel", us=round(us, 3), gbps=round(nbytes / (us * 1e3), 1),
                tflops=round(flops / (us * 1e6), 1), pct_floor=round(100 * nbytes / (copy_gbps * 1e3) / us, 1))
    print(f"{base['variant']:22s} {shape:44s} qfuse {us:9.1f} us {base['tflops']:7.1f} TFLOPS")

    def emit(peer, peer_fn, ref_of):
        try:
            ref = ref_of(peer_fn())
            peer_us = time_us(peer_fn, reps, flush, "kernel")
        except (RuntimeError, TypeError, AttributeError, NotImplementedError) as e:
            print(f"  {peer}: not run ({str(e).splitlines()[0][:100]})")
            return
        err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
        row = dict(base, peer=peer, peer_us=round(peer_us, 3), ratio=round(peer_us / us, 3), rel_err=err)
        out.write(json.dumps(row, separators=(",", ":")) + "\n")
        out.flush()
        print(f"  {peer:16s} {peer_us:9.1f} us  ratio {peer_us / us:5.2f}x  (qfuse vs it: rel. error {err:.1e})")

    # FlashAttention-2's varlen forward as torch ships it: (out, lse, ...) on the packed tensors.
    flash = lambda: torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, mx, mx, 0.0, True, False)  # noqa: E731
    emit("torch-flash-varlen", flash, lambda r: r[0])
    # SDPA over nested jagged tensors [B, H, j, D] (each backend that takes them).
    offsets = cu.to(torch.int64)
    qn, kn, vn = (torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in (q, k, v))
    for peer, backend in BACKENDS.items():
        def nested(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qn, kn, vn, is_causal=True, enable_gqa=hkv != hq)
        emit(peer + "-nested", nested, lambda r: r.transpose(1, 2).values())

    # The same batch with its keys in a paged cache (16-key pages, shuffled) against the dense call.
    page = 16
    pages = [(n + page - 1) // page for n in lens]
    perm = torch.randperm(sum(pages), device=dev, generator=g)
    table = torch.zeros(len(lens), max(pages), dtype=torch.int32, device=dev)
    k_cache = torch.zeros(sum(pages), page, hkv, d, device=dev, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    first = 0
    for b, n in enumerate(lens):
        ids = perm[first:first + pages[b]]
        first += pages[b]
        table[b, :pages[b]] = ids.to(torch.int32)
        kp = torch.zeros(pages[b] * page, hkv, d, device=dev, dtype=torch.bfloat16)
        vp = torch.zeros_like(kp)
        kp[:n], vp[:n] = k[cu[b]:cu[b + 1]], v[cu[b]:cu[b + 1]]
        k_cache[ids], v_cache[ids] = kp.view(-1, page, hkv, d), vp.view(-1, page, hkv, d)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    o_dense = o.clone()
    paged = lambda: ctx.attention_paged_varlen(q, k_cache, v_cache, table, kv_lens, cu, mx, o, lse=lse,  # noqa: E731
                                               causal=True)
    paged_us = time_us_named(paged, reps, flush, "attention")
    err = ((o.float() - o_dense.float()).norm() / o_dense.float().norm()).item()
    row = dict(base, variant="bf16,paged,varlen,causal", us=round(paged_us, 3), gbps=round(nbytes / (paged_us * 1e3), 1),
               tflops=round(flops / (paged_us * 1e6), 1), pct_floor=round(100 * nbytes / (copy_gbps * 1e3) / paged_us, 1),
               peer="qfuse-varlen-contiguous", peer_us=round(us, 3), ratio=round(us / paged_us, 3), rel_err=err)
    out.write(json.dumps(row, separators=(",", ":")) + "\n")
    out.flush()
    print(f"bf16,paged,varlen      {shape:44s} qfuse {paged_us:9.1f} us  contiguous {us:9.1f} us  (difference {err:.1e})")


if __name__ == "__main__":
    sys.exit(main())
