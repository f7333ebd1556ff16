#!/usr/bin/env python3
"""A few calls of one VQ kernel, for a profiler to attach to (Nsight Compute, compute-sanitizer):

    ncu --kernel-name regex:vq_gemv_lut_tiles --launch-count 1 python3 scripts/profile-vq.py gemv
    ncu --kernel-name regex:vq_attention_banked --launch-count 1 python3 scripts/profile-vq.py attention cq-4

gemv [N K]: GPTVQ-2 on codes packed for the table GeMV (qf_vq_pack_gemv), M = 1 then 2, default
(22016, 8192). attention [preset [page_size]]: decode over a CQ cache, Llama-7B heads (32 of 128)
at batch 8 x 4096 tokens, default cq-4; with a page size each round is the call with lengths then
the same over pages in order (a block table). Random codes and books (the kernels' time does not
depend on them).
Needs torch with CUDA and QFUSE_LIBRARY / PYTHONPATH=python as for tests/python."""
import sys

import torch

import qfuse


def gemv(ctx, n=22016, k=8192):
    fmt = ctx.vq_format("gptvq-2")
    sz = ctx.vq_sizes(fmt, n, k)
    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 256, (fmt.residuals, n, sz.row_bytes), dtype=torch.uint8, device="cuda", generator=g)
    books = (torch.randn(fmt.residuals, sz.n_books, sz.entries, fmt.vector_size, device="cuda", generator=g) * 0.02).half()
    packed = torch.empty(ctx.vq_pack_gemv_shape(fmt, n, k), dtype=torch.uint8, device="cuda")
    ctx.vq_pack_gemv(codes, fmt, k, packed)
    for m in (1, 2):
        x = torch.randn(m, k, device="cuda", generator=g).half()
        y = torch.empty(m, n, device="cuda").half()
        for _ in range(3):
            ctx.vq_gemm(x, packed, books, fmt, y)


def attention(ctx, preset="cq-4", page_size="0", batch=8, seq=4096, heads=32, dim=128):
    fmt = ctx.vq_format(preset)
    page_size = int(page_size)
    sz = ctx.vq_sizes(fmt, batch * seq, heads * dim)
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (fmt.residuals, batch * seq, sz.row_bytes)
    kc, vc = (torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=g) for _ in range(2))
    kb, vb = (torch.randn(fmt.residuals, sz.n_books, sz.entries, fmt.vector_size, device="cuda", generator=g).half()
              for _ in range(2))
    q = torch.randn(batch, heads * dim, device="cuda", generator=g).half()
    o = torch.empty(batch, heads * dim, device="cuda").half()
    lse = torch.empty(batch, heads, device="cuda")
    if not page_size:
        for _ in range(3):
            ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o, lse, dim, heads, seq)
        return
    # The same cache through a block table of pages in order, each round after the unpaged call
    # with the same lengths (the pair to compare).
    lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    pages = seq // page_size
    table = torch.arange(batch * pages, dtype=torch.int32, device="cuda").reshape(batch, pages)
    for _ in range(3):
        ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o, lse, dim, heads, seq, kv_lens=lens)
        ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o, lse, dim, heads, seq, kv_lens=lens, block_table=table,
                                page_size=page_size)


if __name__ == "__main__":
    ctx = qfuse.Context("cuda")
    what, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("gemv", [])
    if what == "gemv":
        gemv(ctx, *map(int, args))
    elif what == "attention":
        attention(ctx, *args)
    else:
        sys.exit(__doc__)
    torch.cuda.synchronize()
