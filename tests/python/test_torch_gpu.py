"""The Python binding on torch CUDA tensors (run on the GPU machine): qfuse on CUDA equals
qfuse on the CPU bit for bit, and torch's own float8 cast agrees on finite in-range values."""
import unittest

import torch

import qfuse


class TestTorchGpu(unittest.TestCase):
    def test_quant_per_tensor_matches_cpu(self):
        self.assertTrue(torch.cuda.is_available(), "this test needs a GPU")
        gpu, cpu = qfuse.Context("cuda:0"), qfuse.Context("cpu")
        gpu.set_stream(torch.cuda.current_stream().cuda_stream)
        torch.manual_seed(0)
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            x = (torch.randn(257, 1000, device="cuda") * 40).to(dtype)
            x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30]).to(dtype)
            scale = torch.tensor([0.37], device="cuda")
            q = torch.empty(257, 1000, dtype=torch.float8_e4m3fn, device="cuda")
            gpu.quant_per_tensor(x, scale, q)
            qc = torch.empty(257, 1000, dtype=torch.uint8)
            cpu.quant_per_tensor(x.cpu(), scale.cpu(), qfuse.view(qc, "e4m3fn"))
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(q.view(torch.uint8).cpu(), qc), f"{dtype}: GPU differs from CPU")
            # torch's cast (round to nearest even) on the finite part, computed as x * (1/scale)
            inv = 1.0 / scale.double().float()
            v = x[1:].float() * inv
            ref = v.clamp(-448, 448).to(torch.float8_e4m3fn)
            self.assertTrue(torch.equal(ref.view(torch.uint8), q[1:].view(torch.uint8)), f"{dtype}: differs from torch")


class TestTorchFamily(unittest.TestCase):
    """Every CUDA op of the binding on torch tensors, against the same op on the CPU."""

    def setUp(self):
        self.gpu, self.cpu = qfuse.Context("cuda:0"), qfuse.Context("cpu")
        self.gpu.set_stream(torch.cuda.current_stream().cuda_stream)
        torch.manual_seed(1)

    def both(self, fn, *tensors):
        """Runs fn(ctx, *tensors) on CUDA and on CPU copies; returns both sets of tensors."""
        g = [t.clone() for t in tensors]
        c = [t.cpu().clone() for t in tensors]
        fn(self.gpu, *g)
        torch.cuda.synchronize()
        fn(self.cpu, *c)
        return g, c

    def assert_same(self, g, c, what):
        for i, (a, b) in enumerate(zip(g, c)):
            a, b = a.cpu(), b
            same = torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.element_size() == 1 else torch.equal(
                a.view(torch.int32 if a.element_size() == 4 else torch.int16), b.view(torch.int32 if b.element_size() == 4 else torch.int16))
            self.assertTrue(same, f"{what}: tensor {i} differs between CUDA and CPU")

    def test_quant_family(self):
        x = torch.randn(37, 1024, device="cuda").to(torch.bfloat16) * 3
        q = torch.empty(37, 1024, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(8, 40, device="cuda")  # COL_MAJOR_TMA: [KG, Mp], viewed as [KG, M]
        g, c = self.both(lambda ctx, x, q, s: ctx.quant_group(x, q, s[:, :37], scale_layout="col_major_tma"), x, q, s)
        self.assert_same(g[1:], c[1:], "quant_group")
        xg = torch.randn(5, 512, device="cuda").to(torch.bfloat16)
        q2 = torch.empty(5, 256, dtype=torch.int8, device="cuda")
        s2 = torch.empty(5, 4, device="cuda")
        g, c = self.both(lambda ctx, x, q, s: ctx.silu_mul_quant_group(x, q, s, alpha=1.702, limit=7.0, up_plus_one=True,
                                                                     group_size=64), xg, q2, s2)
        self.assert_same(g[1:], c[1:], "silu_mul_quant_group")
        # fast_exp: int8 codes within one step of the exact CPU result, scales within 1e-6.
        g, c = self.both(lambda ctx, x, q, s: ctx.silu_mul_quant_group(x, q, s, group_size=64, fast_exp=True), xg, q2, s2)
        step = (g[1].cpu().to(torch.int32) - c[1].to(torch.int32)).abs().max().item()
        self.assertLessEqual(step, 1, "silu_mul_quant_group fast_exp: a code more than one step off")
        self.assertTrue(torch.allclose(g[2].cpu(), c[2], rtol=1e-6, atol=0), "silu_mul_quant_group fast_exp: scales")
        q3 = torch.empty(37, 1024, dtype=torch.int8, device="cuda")
        s3 = torch.empty(37, device="cuda")
        z3 = torch.empty(37, dtype=torch.int32, device="cuda")
        g, c = self.both(lambda ctx, x, q, s, z: ctx.quant_token(x, q, s, z), x, q3, s3, z3)
        self.assert_same(g[1:], c[1:], "quant_token")
        res = torch.randn(37, 1024, device="cuda").to(torch.bfloat16)
        w = torch.rand(1024, device="cuda").to(torch.bfloat16) + 0.5
        s4 = torch.empty(37, 8, device="cuda")
        g, c = self.both(lambda ctx, x, r, w, q, s: ctx.rms_norm_quant(x, r, w, q, s), x, res, w, q, s4)
        self.assert_same(g[1:2] + g[3:], c[1:2] + c[3:], "rms_norm_quant")
        s5 = torch.empty(1, device="cuda")
        g, c = self.both(lambda ctx, x, q, s: ctx.quant_tensor(x, q, s, dynamic=True), x, q, s5)
        self.assert_same(g[1:], c[1:], "quant_tensor dynamic")

    def test_gemm_fp8_blockscale(self):
        m, n, k = 77, 256, 512
        a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        a_s = torch.rand(4, 80, device="cuda") + 0.5  # [KB, Mp]
        b_s = torch.rand(2, 4, device="cuda") + 0.5
        d = torch.empty(m, n, device="cuda")
        self.gpu.gemm_fp8_blockscale(a, a_s[:, :m], b, b_s, d)
        ref = torch.empty(m, n)
        self.cpu.gemm_fp8_blockscale(a.cpu(), a_s.cpu()[:, :m], b.cpu(), b_s.cpu(), ref)
        torch.cuda.synchronize()
        err = ((d.cpu() - ref).norm() / ref.norm()).item()
        self.assertLess(err, 1e-3)

    def test_gemm_in_cuda_graph(self):
        # A decode GEMM that splits K (partials and counters in the workspace), captured in a torch
        # CUDA graph on a context whose workspace was reserved, replayed on new activations: each
        # replay equals a direct call bit for bit. Without the reservation the capture raises.
        m, n, k = 16, 2112, 7168
        a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="cuda")
        b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        a_s = torch.rand(k // 128, m, device="cuda") + 0.5  # [KB, Mp], Mp = M here
        b_s = torch.rand((n + 127) // 128, k // 128, device="cuda") + 0.5
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        stream = torch.cuda.Stream()
        fresh = qfuse.Context("cuda:0")
        fresh.set_stream(stream.cuda_stream)
        with self.assertRaises(qfuse.QfuseError) as cm:
            with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream):
                fresh.gemm_fp8_blockscale(a, a_s, b, b_s, d)
        self.assertIn("qf_ctx_reserve_workspace", str(cm.exception))
        self.assertEqual(fresh.workspace_bytes, 0)
        ctx = qfuse.Context("cuda:0")
        ctx.set_stream(stream.cuda_stream)
        ctx.reserve_workspace(4096 + 128 * 1024 * torch.cuda.get_device_properties(0).multi_processor_count)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            ctx.gemm_fp8_blockscale(a, a_s, b, b_s, d)
        previous = None
        for _ in range(3):
            a.copy_((torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn))
            d.fill_(float("nan"))
            graph.replay()
            want = torch.empty_like(d)
            self.gpu.gemm_fp8_blockscale(a, a_s, b, b_s, want)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(d.view(torch.int16), want.view(torch.int16)), "replay differs from the direct call")
            if previous is not None:
                self.assertFalse(torch.equal(d, previous), "two rounds gave the same D")
            previous = d.clone()

    def test_gemm_fp8_blockscale_masked(self):
        # Three experts of 128 rows holding 5, 0 and 128 tokens, SwiGLU: GPU against the CPU backend
        # on the rows of the blocks that run (the expert without tokens keeps its poison).
        e, max_m, n, k = 3, 128, 256, 512
        a = (torch.randn(e, max_m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(e, n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        a_s = torch.rand(4, e * max_m, device="cuda") + 0.5
        b_s = torch.rand(e, 2, 4, device="cuda") + 0.5
        counts = torch.tensor([5, 0, 128], dtype=torch.int32, device="cuda")
        d = torch.full((e, max_m, n // 2), float("nan"), device="cuda")
        self.gpu.gemm_fp8_blockscale_masked(a, a_s, b, b_s, counts, d, epilogue="swiglu")
        ref = torch.full((e, max_m, n // 2), float("nan"))
        self.cpu.gemm_fp8_blockscale_masked(a.cpu(), a_s.cpu(), b.cpu(), b_s.cpu(), counts.cpu(), ref, epilogue="swiglu")
        torch.cuda.synchronize()
        got = d.cpu()
        self.assertTrue(torch.isnan(got[1]).all())
        live = torch.cat([got[0], got[2]]), torch.cat([ref[0], ref[2]])
        err = ((live[0] - live[1]).norm() / live[1].norm()).item()
        self.assertLess(err, 1e-3)

    def test_attention_against_sdpa(self):
        # bf16 causal GQA prefill and a split decode step against torch's SDPA on the fp32 upcasts.
        import torch.nn.functional as F
        for sq, skv in ((300, 300), (1, 3000)):
            q = torch.randn(2, sq, 8, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(2, skv, 2, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(2, skv, 2, 128, device="cuda", dtype=torch.bfloat16)
            o = torch.empty_like(q)
            lse = torch.empty(2, 8, sq, device="cuda")
            self.gpu.attention(q, k, v, o, lse=lse, causal=True)
            qt, kt, vt = (t.float().transpose(1, 2) for t in (q, k, v))
            kt, vt = kt.repeat_interleave(4, dim=1), vt.repeat_interleave(4, dim=1)
            s = qt @ kt.transpose(-1, -2) / 128 ** 0.5
            pos = torch.arange(sq, device="cuda")[:, None] + skv - sq
            s = s.masked_fill(torch.arange(skv, device="cuda")[None, :] > pos, float("-inf"))
            ref = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=s.isfinite()).transpose(1, 2)
            err = ((o.float() - ref).norm() / ref.norm()).item()
            self.assertLess(err, 1e-2)
            self.assertLess((lse - torch.logsumexp(s, -1)).abs().max().item(), 1e-3)

    def test_vq_ragged_decode_step(self):
        # A decode step over a CQ-2 cache of 3 sequences holding 0, 37 and 599 of 600 slots: the
        # new tokens appended by slot (qf_vq_encode_slots) then attention with the lengths one
        # longer, on torch CUDA tensors: the appended codes equal the CPU's byte for byte, o and
        # lse the CPU's within 1e-3, the empty entry's none (its one token is the new one).
        cpu = self.cpu
        fmt = self.gpu.vq_format("cq-2")
        bsz, seq, hkv, dim = 3, 600, 4, 128
        sz = self.gpu.vq_sizes(fmt, bsz * seq, hkv * dim)
        torch.manual_seed(3)
        codes = [torch.randint(0, 256, (1, bsz * seq, sz.row_bytes), dtype=torch.uint8) for _ in range(2)]
        books = [torch.randn(1, sz.n_books, 256, 4).half() for _ in range(2)]
        lens = torch.tensor([0, 37, 599], dtype=torch.int32)
        slots = torch.arange(bsz, dtype=torch.int32) * seq + lens
        new = torch.randn(bsz, hkv * dim).half()
        q = torch.randn(bsz, hkv * dim).half()
        outs = {}
        for name, ctx, dev in (("gpu", self.gpu, "cuda"), ("cpu", cpu, "cpu")):
            c = [t.clone().to(dev) for t in codes]
            b = [t.to(dev) for t in books]
            for m in range(2):
                ctx.vq_encode_slots(new.to(dev), slots.to(dev), b[m], fmt, c[m])
            o = torch.empty(bsz, hkv * dim, dtype=torch.float32, device=dev)
            lse = torch.empty(bsz, hkv, device=dev)
            ctx.vq_attention_decode(q.to(dev), c[0], b[0], c[1], b[1], fmt, o, lse, head_dim=dim, kv_heads=hkv,
                                    seq_len=seq, kv_lens=(lens + 1).to(dev))
            torch.cuda.synchronize()
            outs[name] = [t.cpu() for t in c] + [o.cpu(), lse.cpu()]
        for m in range(2):
            self.assertTrue(torch.equal(outs["gpu"][m], outs["cpu"][m]), "appended codes differ from the CPU's")
            self.assertFalse(torch.equal(outs["gpu"][m], codes[m]), "nothing was appended")
        self.assertLess((outs["gpu"][2] - outs["cpu"][2]).abs().max().item(), 1e-3)
        self.assertLess((outs["gpu"][3] - outs["cpu"][3]).abs().max().item(), 1e-3)
        # the same step in one call (qf_vq_attention_decode_append: the new token at L_b - 1 of
        # the lengths one longer): the two calls' caches, o and lse byte for byte
        c = [t.clone().cuda() for t in codes]
        b = [t.cuda() for t in books]
        o = torch.empty(bsz, hkv * dim, dtype=torch.float32, device="cuda")
        lse = torch.empty(bsz, hkv, device="cuda")
        self.gpu.vq_attention_decode_append(q.cuda(), new.cuda(), new.cuda(), c[0], b[0], c[1], b[1], fmt, o, lse,
                                            head_dim=dim, kv_heads=hkv, seq_len=seq, kv_lens=(lens + 1).cuda())
        torch.cuda.synchronize()
        for got, want in zip([t.cpu() for t in c] + [o.cpu(), lse.cpu()], outs["gpu"]):
            self.assertTrue(torch.equal(got, want), "the step in one call differs from the two calls")

    def test_nvfp4_quant_pack_gemm(self):
        # Weights quantized and packed on the GPU (the same bytes as on the CPU), then the GEMM
        # against torch's fp32 matmul of the dequantized weight.
        n, k = 256, 1024
        w = torch.randn(n, k, device="cuda")
        ts = (w.abs().max() / (6 * 448)).reshape(1)
        codes = torch.empty(n, k // 2, dtype=torch.uint8, device="cuda")
        scales = torch.empty(n, k // 16, dtype=torch.uint8, device="cuda")
        packed = torch.empty_like(codes)
        quant = lambda ctx, w, ts, c, s: ctx.quant_nvfp4(w, ts, qfuse.view(c, "e2m1x2"), qfuse.view(s, "e4m3fn"))  # noqa: E731
        g, c = self.both(quant, w, ts, codes, scales)
        self.assert_same(g[2:], c[2:], "quant_nvfp4")
        codes, scales = g[2], g[3]
        self.gpu.nvfp4_pack(qfuse.view(codes, "e2m1x2"), qfuse.view(packed, "e2m1x2"))
        table = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], device="cuda")
        nib = torch.stack([codes & 15, codes >> 4], dim=-1).view(n, k).long()
        wq = table[nib] * scales.view(torch.float8_e4m3fn).float().repeat_interleave(16, dim=1) * ts
        for m in (1, 16, 40):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            d = torch.empty(m, n, device="cuda", dtype=torch.float32)
            self.gpu.gemm_nvfp4(a, qfuse.view(packed, "e2m1x2"), qfuse.view(scales, "e4m3fn"), ts, d)
            ref = a.float() @ wq.t()
            self.assertLess(((d - ref).norm() / ref.norm()).item(), 1e-5)

    def test_gemm_scaled_int8_azp(self):
        # Per-token int8 activations with zero points, per-channel weight scales, bias: the
        # AzpPerToken epilogue, equal to the exact CPU reference up to the final fp32 roundings.
        m, n, k = 33, 64, 256
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        sa = torch.rand(m, device="cuda") * 1e-2 + 1e-3
        sb = torch.rand(n, device="cuda") * 1e-2 + 1e-3
        bias = torch.randn(n, device="cuda")
        azp = torch.randint(-128, 128, (m,), dtype=torch.int32, device="cuda")
        adj = torch.empty(n, dtype=torch.int32, device="cuda")
        self.gpu.gemm_azp_adj(b, adj, multiplier=1)
        d = torch.empty(m, n, device="cuda")
        self.gpu.gemm_scaled(a, sa, b, sb, d, bias=bias, azp_adj=adj, azp=azp)
        ref = torch.empty(m, n)
        self.cpu.gemm_scaled(a.cpu(), sa.cpu(), b.cpu(), sb.cpu(), ref, bias=bias.cpu(), azp_adj=adj.cpu(), azp=azp.cpu())
        torch.cuda.synchronize()
        self.assertTrue(torch.allclose(d.cpu(), ref, rtol=1e-5, atol=1e-5), "gemm_scaled int8 azp: CUDA != CPU")


if __name__ == "__main__":
    unittest.main()
