"""The Python binding on NumPy arrays through the CPU backend (run by CI)."""
import math
import unittest

import numpy as np

import qfuse


def e4m3fn_values():
    """Value of every e4m3fn code, from the format's definition (NaN for 0x7F/0xFF)."""
    vals = np.empty(256, np.float64)
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        mag = math.ldexp(1 + m / 8, e - 7) if e else math.ldexp(m / 8, -6)
        vals[c] = math.nan if (e == 15 and m == 7) else (-mag if c & 0x80 else mag)
    return vals


class TestQuantPerTensor(unittest.TestCase):
    def setUp(self):
        self.ctx = qfuse.Context("cpu")
        self.rng = np.random.default_rng(7)

    def test_version(self):
        self.assertRegex(qfuse.version(), r"^\d+\.\d+\.\d+$")

    def test_cpu_context_has_no_pdl(self):
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.set_pdl(True)
        self.assertIn("qf_ctx_set_pdl", str(cm.exception))

    def test_cpu_context_has_no_workspace(self):
        self.assertEqual(self.ctx.workspace_bytes, 0)
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.reserve_workspace(1 << 20)
        self.assertIn("qf_ctx_reserve_workspace", str(cm.exception))

    def test_e4m3fn_nearest(self):
        x = (self.rng.standard_normal((5, 48)) * 30).astype(np.float32)
        scale = np.array([0.25], np.float32)
        q = np.full((5, 48), 0xA5, np.uint8)
        self.ctx.quant_per_tensor(x, scale, qfuse.view(q, "e4m3fn"))
        vals = e4m3fn_values()
        finite = np.where(np.isnan(vals), np.inf, vals)
        v = (x * np.float32(1 / np.float32(0.25))).astype(np.float64)
        got = vals[q]
        # every output is a nearest representable value (saturated to +-448)
        err = np.abs(got - np.clip(v, -448, 448))
        best = np.min(np.abs(finite[None, :] - np.clip(v, -448, 448).reshape(-1, 1)), axis=1).reshape(v.shape)
        np.testing.assert_array_equal(err, best)

    def test_int8_and_strided_rows(self):
        base = (self.rng.standard_normal((6, 40)) * 50).astype(np.float32)
        x = base[:, :32]  # row stride 40, last dim contiguous
        q = np.zeros((6, 32), np.int8)
        self.ctx.quant_per_tensor(x, np.array([0.5], np.float32), q)
        want = np.clip(np.rint(x.astype(np.float64) * 2.0), -128, 127).astype(np.int8)
        np.testing.assert_array_equal(q, want)

    def test_errors_leave_output_untouched(self):
        x = np.ones((4, 30), np.float32)
        q = np.full((4, 32), 7, np.int8)
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.quant_per_tensor(x, np.array([1.0], np.float32), q)
        self.assertIn("q.shape[1]=32", str(cm.exception))
        self.assertTrue((q == 7).all())
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.quant_per_tensor(x.astype(np.float64), np.array([1.0], np.float32), q[:, :30])
        self.assertIn("x has dtype unknown", str(cm.exception))
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.quant_per_tensor(x, np.array([1.0, 2.0], np.float32), q[:, :30])
        self.assertIn("scale has shape [2]", str(cm.exception))
        self.assertTrue((q == 7).all())
        with self.assertRaises(ValueError):
            qfuse.view(q, "e9m9")
        with self.assertRaises(ValueError):
            self.ctx.quant_per_tensor(x, np.array([1.0], np.float32), qfuse.view(x, "e4m3fn"))


class TestFamily(unittest.TestCase):
    """Each op reachable from Python, checked against NumPy formulas on the CPU backend."""

    def setUp(self):
        self.ctx = qfuse.Context("cpu")
        self.rng = np.random.default_rng(3)
        self.vals = e4m3fn_values()

    def test_quant_group_layouts(self):
        x = self.rng.standard_normal((6, 256)).astype(np.float32)
        q = np.empty((6, 256), np.uint8)
        s_row = np.empty((6, 2), np.float32)
        self.ctx.quant_group(x, qfuse.view(q, "e4m3fn"), s_row, group_size=128)
        amax = np.abs(x.reshape(6, 2, 128)).max(axis=2)
        np.testing.assert_array_equal(s_row, np.maximum(amax / np.float32(448), np.float32(1e-10)))
        # TMA-aligned column-major scales: [KG, M] with M padded to 8, padding zero
        s_tma = np.full((2, 8), 7.0, np.float32)
        self.ctx.quant_group(x, qfuse.view(q, "e4m3fn"), s_tma[:, :6], group_size=128, scale_layout="col_major_tma")
        np.testing.assert_array_equal(s_tma[:, :6], s_row.T)
        np.testing.assert_array_equal(s_tma[:, 6:], 0)
        deq = self.vals[q].reshape(6, 2, 128) * s_row[:, :, None]
        self.assertLess(np.abs(deq - x.reshape(6, 2, 128)).max() / np.abs(x).max(), 0.07)

    def test_silu_mul_and_token(self):
        h = 128
        x = self.rng.standard_normal((3, 2 * h)).astype(np.float32)
        xb = (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation: exact test values
        xf = (xb.astype(np.uint32) << 16).view(np.float32)
        q = np.empty((3, h), np.uint8)
        s = np.empty((3, 1), np.float32)
        self.ctx.silu_mul_quant_group(qfuse.view(xb, "bf16"), qfuse.view(q, "e4m3fn"), s)
        g, u = xf[:, :h].astype(np.float64), xf[:, h:].astype(np.float64)
        v = g / (1 + np.exp(-g)) * u
        np.testing.assert_allclose(s[:, 0], np.abs(v).max(axis=1) / 448, rtol=1e-5)
        qi = np.empty((3, h), np.int8)
        st = np.empty(3, np.float32)
        azp = np.empty(3, np.int32)
        self.ctx.quant_token(xf[:, :h].copy(), qi, st, azp)
        err = np.abs(st[:, None] * (qi.astype(np.float64) - azp[:, None]) - xf[:, :h])
        self.assertTrue((err <= 0.5001 * st[:, None]).all())

    def test_rms_norm_and_tensor(self):
        x = self.rng.standard_normal((4, 128)).astype(np.float32)
        xb = (x.view(np.uint32) >> 16).astype(np.uint16)
        w = np.full(128, 0x3F80, np.uint16)  # bf16 ones
        q = np.empty((4, 128), np.uint8)
        s = np.empty(4, np.float32)
        self.ctx.rms_norm_quant(qfuse.view(xb, "bf16"), None, qfuse.view(w, "bf16"), qfuse.view(q, "e4m3fn"), s,
                                group_size=-1)
        y = (xb.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        v = y / np.sqrt((y * y).mean(axis=1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(s, np.abs(v).max(axis=1) / 448, rtol=1e-5)
        sc = np.zeros(1, np.float32)
        self.ctx.quant_tensor(x, qfuse.view(q, "e4m3fn"), sc, dynamic=True)
        self.assertEqual(sc[0], np.float32(np.abs(x).max()) / np.float32(448))

    def test_gemms(self):
        m, n, k = 3, 16, 256
        a = self.rng.integers(0, 0x70, (m, k), dtype=np.uint8)
        b = self.rng.integers(0, 0x70, (n, k), dtype=np.uint8)
        a_s = np.ones((2, 4), np.float32)  # [KB, Mp]: column-major, M padded to 4
        b_s = np.full((1, 2), 0.5, np.float32)
        d = np.empty((m, n), np.float32)
        self.ctx.gemm_fp8_blockscale(qfuse.view(a, "e4m3fn"), a_s[:, :3], qfuse.view(b, "e4m3fn"), b_s, d)
        np.testing.assert_allclose(d, 0.5 * self.vals[a] @ self.vals[b].T, rtol=1e-6)
        d_fine = np.empty_like(d)
        self.ctx.gemm_fp8_blockscale(qfuse.view(a, "e4m3fn"), a_s[:, :3], qfuse.view(b, "e4m3fn"), b_s, d_fine,
                                     fine_promotion=True)
        np.testing.assert_array_equal(d_fine, d)  # the CPU sums in float64 either way
        self.ctx.gemm_fp8_blockscale(qfuse.view(a, "e4m3fn"), a_s[:, :3], qfuse.view(b, "e4m3fn"), b_s, d_fine,
                                     fine_promotion=64)
        np.testing.assert_array_equal(d_fine, d)
        with self.assertRaises(qfuse.QfuseError):  # 0, 1, 32 or 64 only
            self.ctx.gemm_fp8_blockscale(qfuse.view(a, "e4m3fn"), a_s[:, :3], qfuse.view(b, "e4m3fn"), b_s, d_fine,
                                         fine_promotion=16)
        with self.assertRaises(qfuse.QfuseError):  # fp32 d only
            self.ctx.gemm_fp8_blockscale(qfuse.view(a, "e4m3fn"), a_s[:, :3], qfuse.view(b, "e4m3fn"), b_s,
                                         qfuse.view(np.empty((m, n), np.uint16), "bf16"), fine_promotion=True)
        # grouped: two experts, rows 0-127 on expert 1, 128-130 on expert 0 (per-row ids taken every 128th)
        bg = self.rng.integers(0, 0x70, (2, n, k), dtype=np.uint8)
        bg_s = np.array([[[0.5, 0.5]], [[2.0, 2.0]]], np.float32)
        ag = self.rng.integers(0, 0x70, (131, k), dtype=np.uint8)
        ag_s = np.ones((2, 132), np.float32)
        rows = np.array([1] * 128 + [0] * 3, np.int32)
        dg = np.empty((131, n // 2), np.float32)
        self.ctx.gemm_fp8_blockscale_grouped(qfuse.view(ag, "e4m3fn"), ag_s[:, :131], qfuse.view(bg, "e4m3fn"), bg_s,
                                             rows[::128], dg, epilogue="swiglu")
        y = np.concatenate([2.0 * self.vals[ag[:128]] @ self.vals[bg[1]].T, 0.5 * self.vals[ag[128:]] @ self.vals[bg[0]].T])
        cols = np.arange(n // 2)
        gate, up = y[:, cols // 8 * 16 + cols % 8], y[:, cols // 8 * 16 + 8 + cols % 8]
        np.testing.assert_allclose(dg, gate / (1 + np.exp(-gate)) * up, rtol=1e-5)
        ai = self.rng.integers(-128, 128, (m, 32), dtype=np.int8)
        bi = self.rng.integers(-127, 128, (n, 32), dtype=np.int8)
        adj = np.empty(n, np.int32)
        self.ctx.gemm_azp_adj(bi, adj)
        np.testing.assert_array_equal(adj, bi.astype(np.int64).sum(axis=1))
        azp = np.array([1, -2, 3], np.int32)
        d2 = np.empty((m, n), np.float32)
        self.ctx.gemm_scaled(ai, np.float32([0.5]), bi, np.float32([0.25]), d2, azp_adj=adj, azp=azp)
        want = 0.125 * (ai.astype(np.int64) @ bi.astype(np.int64).T - azp[:, None] * adj[None, :])
        np.testing.assert_allclose(d2, want, rtol=1e-6)

    def test_gemm_masked(self):
        # masked MoE layout: expert 0 has 3 tokens (its block computed whole), expert 1 none (its
        # rows of D untouched)
        n, k = 16, 256
        a = self.rng.integers(0, 0x70, (2, 128, k), dtype=np.uint8)
        a_s = np.ones((2, 256), np.float32)  # [KB, E * max_m], column-major
        b = self.rng.integers(0, 0x70, (2, n, k), dtype=np.uint8)
        b_s = np.array([[[0.5, 0.5]], [[2.0, 2.0]]], np.float32)
        d = np.full((2, 128, n), 7.0, np.float32)
        self.ctx.gemm_fp8_blockscale_masked(qfuse.view(a, "e4m3fn"), a_s, qfuse.view(b, "e4m3fn"), b_s,
                                            np.array([3, 0], np.int32), d)
        np.testing.assert_allclose(d[0], 0.5 * self.vals[a[0]] @ self.vals[b[0]].T, rtol=1e-6)
        self.assertTrue((d[1] == 7.0).all())
        with self.assertRaises(qfuse.QfuseError):  # a count past max_m
            self.ctx.gemm_fp8_blockscale_masked(qfuse.view(a, "e4m3fn"), a_s, qfuse.view(b, "e4m3fn"), b_s,
                                                np.array([3, 129], np.int32), d)

    def test_vq_attention_decode(self):
        # CQ-2 caches of 2 sequences x 5 tokens, 2 kv heads of 8 dims, 4 query heads (GQA): the
        # softmax over the dequantized keys and values, in float64
        fmt = self.ctx.vq_format("cq-2")
        bsz, seq, hkv, hq, dim = 2, 5, 2, 4, 8
        sz = self.ctx.vq_sizes(fmt, bsz * seq, hkv * dim)
        kc, vc = (self.rng.integers(0, 256, (1, bsz * seq, sz.row_bytes), dtype=np.uint8) for _ in range(2))
        kb, vb = (self.rng.standard_normal((1, sz.n_books, 256, 4)).astype(np.float16) for _ in range(2))
        kw, vw = np.empty((bsz * seq, hkv * dim), np.float32), np.empty((bsz * seq, hkv * dim), np.float32)
        self.ctx.vq_dequantize(kc, kb, fmt, kw)
        self.ctx.vq_dequantize(vc, vb, fmt, vw)
        q = self.rng.standard_normal((bsz, hq * dim)).astype(np.float32)
        o, lse = np.empty((bsz, hq * dim), np.float32), np.empty((bsz, hq), np.float32)
        self.ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o, lse, head_dim=dim, kv_heads=hkv, seq_len=seq)
        for b in range(bsz):
            for h in range(hq):
                g = h // (hq // hkv)
                keys = kw[b * seq:(b + 1) * seq, g * dim:(g + 1) * dim].astype(np.float64)
                vals = vw[b * seq:(b + 1) * seq, g * dim:(g + 1) * dim].astype(np.float64)
                s = keys @ q[b, h * dim:(h + 1) * dim].astype(np.float64) / math.sqrt(dim)
                want_lse = math.log(np.exp(s - s.max()).sum()) + s.max()
                np.testing.assert_allclose(o[b, h * dim:(h + 1) * dim], np.exp(s - want_lse) @ vals, rtol=1e-5,
                                           atol=1e-6)
                self.assertAlmostEqual(float(lse[b, h]), want_lse, places=5)
        # lengths per entry: entry 0 over its first 3 tokens equals a cache of those 3 tokens;
        # entry 1 holds none (o = 0, lse = -inf)
        o2, lse2 = np.empty_like(o), np.empty_like(lse)
        self.ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o2, lse2, head_dim=dim, kv_heads=hkv, seq_len=seq,
                                     kv_lens=np.array([3, 0], np.int32))
        o3, lse3 = np.empty((1, hq * dim), np.float32), np.empty((1, hq), np.float32)
        self.ctx.vq_attention_decode(q[:1], kc[:, :3].copy(), kb, vc[:, :3].copy(), vb, fmt, o3, lse3, head_dim=dim,
                                     kv_heads=hkv, seq_len=3)
        np.testing.assert_array_equal(o2[:1], o3)
        np.testing.assert_array_equal(lse2[:1], lse3)
        np.testing.assert_array_equal(o2[1], 0.0)
        self.assertTrue(np.all(lse2[1] == -np.inf))
        with self.assertRaises(qfuse.QfuseError):
            self.ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o2, lse2, head_dim=dim, kv_heads=hkv, seq_len=seq,
                                         kv_lens=np.array([3, seq + 1], np.int32))
        # a decode step's append by slot: entry b's new token at row b * seq + L_b, as qf_vq_encode
        # of that row alone; the other rows unchanged
        new = self.rng.standard_normal((bsz, hkv * dim)).astype(np.float32)
        slots = np.array([0 * seq + 3, 1 * seq + 0], np.int32)
        cache = kc.copy()
        self.ctx.vq_encode_slots(new, slots, kb, fmt, cache)
        for b in range(bsz):
            one = np.empty((1, 1, sz.row_bytes), np.uint8)
            self.ctx.vq_encode(new[b:b + 1], 0, kb, fmt, one)
            np.testing.assert_array_equal(cache[:, slots[b]], one[:, 0])
        others = np.setdiff1d(np.arange(bsz * seq), slots)
        np.testing.assert_array_equal(cache[:, others], kc[:, others])
        # K and V in one call (qf_vq_encode_kv_slots): each cache as vq_encode_slots leaves it
        newv = self.rng.standard_normal((bsz, hkv * dim)).astype(np.float32)
        vcache, kcache2, vcache2 = vc.copy(), kc.copy(), vc.copy()
        self.ctx.vq_encode_slots(newv, slots, vb, fmt, vcache)
        self.ctx.vq_encode_kv_slots(new, newv, slots, kb, vb, fmt, kcache2, vcache2)
        np.testing.assert_array_equal(kcache2, cache)
        np.testing.assert_array_equal(vcache2, vcache)
        # a decode step in one call (qf_vq_attention_decode_append): the new rows at token L_b - 1,
        # then the attention, as qf_vq_encode_kv_slots then qf_vq_attention_decode
        lens = np.array([4, 1], np.int32)
        kcache3, vcache3, kcache4, vcache4 = kc.copy(), vc.copy(), kc.copy(), vc.copy()
        o5, lse5, o6, lse6 = np.empty_like(o), np.empty_like(lse), np.empty_like(o), np.empty_like(lse)
        self.ctx.vq_attention_decode_append(q, new, newv, kcache3, kb, vcache3, vb, fmt, o5, lse5, head_dim=dim,
                                            kv_heads=hkv, seq_len=seq, kv_lens=lens)
        self.ctx.vq_encode_kv_slots(new, newv, np.array([0 * seq + 3, 1 * seq + 0], np.int32), kb, vb, fmt, kcache4,
                                    vcache4)
        self.ctx.vq_attention_decode(q, kcache4, kb, vcache4, vb, fmt, o6, lse6, head_dim=dim, kv_heads=hkv, seq_len=seq,
                                     kv_lens=lens)
        for got, want in ((kcache3, kcache4), (vcache3, vcache4), (o5, o6), (lse5, lse6)):
            np.testing.assert_array_equal(got, want)
        # the same cache in pages of 2 rows, shuffled: the contiguous cache's o and lse
        pages = np.array([[4, 0, 3], [1, 5, 2]], np.int32)  # [B, max_pages]; 3 pages of 2 hold 5 tokens
        kp, vp = (np.zeros((1, 12, sz.row_bytes), np.uint8) for _ in range(2))
        for b in range(bsz):
            for t in range(seq):
                kp[:, pages[b, t // 2] * 2 + t % 2] = kc[:, b * seq + t]
                vp[:, pages[b, t // 2] * 2 + t % 2] = vc[:, b * seq + t]
        o4, lse4 = np.empty_like(o), np.empty_like(lse)
        self.ctx.vq_attention_decode(q, kp, kb, vp, vb, fmt, o4, lse4, head_dim=dim, kv_heads=hkv, seq_len=seq,
                                     block_table=pages, page_size=2)
        np.testing.assert_array_equal(o4, o)
        np.testing.assert_array_equal(lse4, lse)

    def test_vq_pack_attention_books(self):
        # CQ-4 V codebooks packed for the banked kernel (64 vectors of 2 per head of 128): column c
        # holds vector 2c (c < 32) or 2 (c - 32) + 1, and the call gives the standard books' o, lse
        fmt = self.ctx.vq_format("cq-4")
        bsz, seq, hkv, dim = 2, 3, 2, 128
        sz = self.ctx.vq_sizes(fmt, bsz * seq, hkv * dim)
        kc, vc = (self.rng.integers(0, 256, (1, bsz * seq, sz.row_bytes), dtype=np.uint8) for _ in range(2))
        kb, vb = (self.rng.standard_normal((1, sz.n_books, 256, 2)).astype(np.float16) for _ in range(2))
        packed = np.empty((1, hkv, 256, 64, 2), np.float16)
        self.ctx.vq_pack_attention_books(vb, fmt, dim, hkv, packed)
        order = [2 * c for c in range(32)] + [2 * c + 1 for c in range(32)]
        for g in range(hkv):
            np.testing.assert_array_equal(packed[0, g], vb[0, [g * 64 + v for v in order]].transpose(1, 0, 2))
        q = self.rng.standard_normal((bsz, hkv * dim)).astype(np.float32)
        o, lse, o2, lse2 = (np.empty(s, np.float32) for s in ((bsz, hkv * dim), (bsz, hkv)) * 2)
        self.ctx.vq_attention_decode(q, kc, kb, vc, vb, fmt, o, lse, head_dim=dim, kv_heads=hkv, seq_len=seq)
        self.ctx.vq_attention_decode(q, kc, kb, vc, packed, fmt, o2, lse2, head_dim=dim, kv_heads=hkv, seq_len=seq)
        np.testing.assert_array_equal(o2, o)
        np.testing.assert_array_equal(lse2, lse)

    def test_vq_round_trip(self):
        fmt = self.ctx.vq_format("gptvq-2")
        w = self.rng.standard_normal((256, 256)).astype(np.float32)
        sz = self.ctx.vq_sizes(fmt, 256, 256)
        self.assertEqual(sz.bits_per_value, 2.0)
        codes = np.zeros((1, 256, sz.row_bytes), np.uint8)
        books = np.zeros((1, sz.n_books, sz.entries, 4), np.float16)
        st = self.ctx.vq_quantize(w, fmt, codes, books, iterations=4)
        back = np.empty_like(w)
        self.ctx.vq_dequantize(codes, books, fmt, back)
        rel = float(((back - w) ** 2).sum() / (w ** 2).sum())
        self.assertAlmostEqual(rel, st.rel_mse, places=6)
        self.assertLess(rel, 0.15)
        # the same bytes on one thread and on three (the struct's threads field reaches the library);
        # a negative count is refused
        for threads in (1, 3):
            c2, b2 = np.zeros_like(codes), np.zeros_like(books)
            self.ctx.vq_quantize(w, fmt, c2, b2, iterations=4, threads=threads)
            np.testing.assert_array_equal(c2, codes)
            np.testing.assert_array_equal(b2, books)
        with self.assertRaises(qfuse.QfuseError) as cm:
            self.ctx.vq_quantize(w, fmt, c2, b2, iterations=4, threads=-1)
        self.assertIn("threads", str(cm.exception))
        # one codebook (a single 256 x 256 tile), its entries stored most used first
        idx = codes[0, :, :64].astype(np.int64)  # 64 vectors of 4 per row, 8-bit indices: one byte each
        counts = np.bincount(idx.ravel(), minlength=256)
        self.assertTrue((np.diff(counts) <= 0).all())
        # VQ-GeMV against the dequantized weight; re-encoding reproduces the codes
        x = self.rng.standard_normal((2, 256)).astype(np.float32)
        y = np.empty((2, 256), np.float32)
        self.ctx.vq_gemm(x, codes, books, fmt, y)
        np.testing.assert_allclose(y, x.astype(np.float64) @ back.T.astype(np.float64), rtol=1e-4, atol=1e-4)
        again = np.zeros_like(codes)
        self.ctx.vq_encode(w, 0, books, fmt, again)
        np.testing.assert_array_equal(again, codes)

    def test_vq_quip4_e8p(self):
        # QuIP#-4 on the E8P lattice: books of scaled lattice points, row scales, bounded error
        fmt = self.ctx.vq_format("quip-4")
        n, k = 16, 128
        w = self.rng.standard_normal((n, k)).astype(np.float32)
        sz = self.ctx.vq_sizes(fmt, n, k)
        self.assertEqual(sz.bits_per_value, 4.0)
        codes = np.zeros((2, n, sz.row_bytes), np.uint8)
        books = np.zeros((2, 1, 65536, 8), np.float16)
        scales = np.zeros(n, np.float32)
        self.assertEqual(fmt.lattice, 1)  # QF_VQ_LATTICE_E8P
        st = self.ctx.vq_quantize(w, fmt, codes, books, scales=scales)
        back = np.empty_like(w)
        self.ctx.vq_dequantize(codes, books, fmt, back, scales=scales)
        rel = float(((back - w) ** 2).sum() / (w ** 2).sum())
        self.assertAlmostEqual(rel, st.rel_mse, places=6)
        self.assertLess(rel, 0.02)
        # entry 0: the all-1/2 pattern shifted by -1/4, i.e. a quarter of the book's scale everywhere
        self.assertTrue((books[:, 0, 0, :] == books[:, 0, 0, :1]).all() and (books[:, 0, 0, 0] > 0).all())

    def test_vq_pack_gemv(self):
        # AQLM-3-like codes (random indices and entries): the packed layout gives the same GeMV
        fmt = self.ctx.vq_format("aqlm-3")
        n, k = 300, 128
        sz = self.ctx.vq_sizes(fmt, n, k)
        codes = self.rng.integers(0, 256, (2, n, sz.row_bytes), dtype=np.uint8)
        books = self.rng.standard_normal((2, 1, 4096, 8)).astype(np.float16)
        shape = self.ctx.vq_pack_gemv_shape(fmt, n, k)
        self.assertEqual(shape, (2, 1, 2, 512 * 12))
        packed = np.full(shape, 0xAB, np.uint8)
        self.ctx.vq_pack_gemv(codes, fmt, k, packed)
        self.assertTrue((packed[:, :, :, n * 12:] == 0).all())  # rows past n
        x = self.rng.standard_normal((1, k)).astype(np.float32)
        y0, y1 = np.empty((1, n), np.float32), np.empty((1, n), np.float32)
        self.ctx.vq_gemm(x, codes, books, fmt, y0)
        self.ctx.vq_gemm(x, packed, books, fmt, y1)
        np.testing.assert_array_equal(y0, y1)


class TestAttention(unittest.TestCase):
    def test_gqa_causal_window_sinks(self):
        # fp16 inputs, k and v handed over as [B, H, S, D] transposed views; NumPy's float64 formula
        rng = np.random.default_rng(3)
        b, sq, skv, hq, hkv, d = 2, 3, 7, 4, 2, 16
        q = rng.standard_normal((b, sq, hq, d)).astype(np.float16)
        k = rng.standard_normal((b, hkv, skv, d)).astype(np.float16).transpose(0, 2, 1, 3)
        v = rng.standard_normal((b, hkv, skv, d)).astype(np.float16).transpose(0, 2, 1, 3)
        sinks = rng.standard_normal(hq).astype(np.float32)
        o = np.full((b, sq, hq, d), np.nan, np.float32)
        lse = np.full((b, hq, sq), np.nan, np.float32)
        ctx = qfuse.Context("cpu")
        ctx.attention(q, k, v, o, lse=lse, sinks=sinks, causal=True, window=3)
        g = hq // hkv
        s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), np.repeat(k, g, axis=2).astype(np.float64)) / math.sqrt(d)
        pos = np.arange(sq)[:, None] + skv - sq
        j = np.arange(skv)[None, :]
        s = np.where((j <= pos) & (j > pos - 3), s, -np.inf)
        z = np.exp(s).sum(-1) + np.exp(sinks.astype(np.float64))[None, :, None]
        want = np.einsum("bhij,bjhd->bihd", np.exp(s) / z[..., None], np.repeat(v, g, axis=2).astype(np.float64))
        np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lse, np.log(z), rtol=1e-6)
        with self.assertRaises(qfuse.QfuseError):  # Hq not a multiple of Hkv: o untouched
            o2 = np.full((b, sq, hq, d), 7.0, np.float32)
            ctx.attention(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2), o2)
        self.assertTrue((o2 == 7.0).all())

    def test_paged_equals_dense(self):
        # Two sequences of 5 and 11 keys in pages of 4, shuffled: the same bytes as the dense call on
        # each sequence's keys gathered; a page out of range is refused.
        rng = np.random.default_rng(5)
        hq, hkv, d, page, lens = 4, 2, 16, 4, [5, 11]
        k_cache = rng.standard_normal((8, page, hkv, d)).astype(np.float16)
        v_cache = rng.standard_normal((8, page, hkv, d)).astype(np.float16)
        table = np.array([[6, 1, 0, 0], [2, 7, 4, 3]], np.int32)
        q = rng.standard_normal((2, 2, hq, d)).astype(np.float16)
        o = np.empty((2, 2, hq, d), np.float32)
        ctx = qfuse.Context("cpu")
        ctx.attention_paged(q, k_cache, v_cache, table, np.array(lens, np.int32), o, causal=True)
        for b, n in enumerate(lens):
            k = k_cache[table[b]].reshape(-1, hkv, d)[None, :n]
            v = v_cache[table[b]].reshape(-1, hkv, d)[None, :n]
            want = np.empty((1, 2, hq, d), np.float32)
            ctx.attention(q[b:b + 1], np.ascontiguousarray(k), np.ascontiguousarray(v), want, causal=True)
            np.testing.assert_array_equal(o[b:b + 1], want)
        with self.assertRaises(qfuse.QfuseError):
            ctx.attention_paged(q, k_cache, v_cache, np.array([[6, 1, 0, 0], [2, 7, 9, 3]], np.int32),
                                np.array(lens, np.int32), o)

    def test_varlen_equals_dense(self):
        # Packed sequences of 3 and 2 queries over 6 and 4 keys, then the second one as paged keys:
        # the same bytes as the dense call per sequence; lse laid out [Hq, total_q].
        rng = np.random.default_rng(7)
        hq, hkv, d, sq, lens = 4, 2, 16, [3, 2], [6, 4]
        q = rng.standard_normal((5, hq, d)).astype(np.float16)
        k = rng.standard_normal((10, hkv, d)).astype(np.float16)
        v = rng.standard_normal((10, hkv, d)).astype(np.float16)
        cu_q, cu_k = np.array([0, 3, 5], np.int32), np.array([0, 6, 10], np.int32)
        o = np.empty((5, hq, d), np.float32)
        lse = np.empty((hq, 5), np.float32)
        ctx = qfuse.Context("cpu")
        ctx.attention_varlen(q, k, v, cu_q, cu_k, 3, 6, o, lse=lse, causal=True)
        for b in range(2):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            want = np.empty((1, sq[b], hq, d), np.float32)
            want_lse = np.empty((1, hq, sq[b]), np.float32)
            ctx.attention(q[None, qs], k[None, ks], v[None, ks], want, lse=want_lse, causal=True)
            np.testing.assert_array_equal(o[qs], want[0])
            np.testing.assert_array_equal(lse[:, qs], want_lse[0])
        page = 2  # the keys as pages of 2, in reverse order
        k_cache = k.reshape(5, page, hkv, d)[::-1].copy()
        v_cache = v.reshape(5, page, hkv, d)[::-1].copy()
        table = np.array([[4, 3, 2], [1, 0, 0]], np.int32)
        o2 = np.empty_like(o)
        ctx.attention_paged_varlen(q, k_cache, v_cache, table, np.array(lens, np.int32), cu_q, 3, o2, causal=True)
        np.testing.assert_array_equal(o2, o)
        with self.assertRaises(qfuse.QfuseError):  # an offset past total_q
            ctx.attention_varlen(q, k, v, np.array([0, 3, 6], np.int32), cu_k, 3, 6, o)

    def test_fp8_kv_equals_fp16_on_its_values(self):
        # e4m3fn k and v with a scale per kv head (powers of two, so code x scale is an fp16 value):
        # the bytes of the call on those fp16 values; the paged form over pages of the same codes.
        rng = np.random.default_rng(11)
        hq, hkv, d, sq, skv = 4, 2, 16, 3, 8
        q = rng.standard_normal((1, sq, hq, d)).astype(np.float16)
        vals = e4m3fn_values()
        k8 = rng.integers(0, 0x78, (1, skv, hkv, d), dtype=np.uint8) | rng.choice([0, 0x80], (1, skv, hkv, d)).astype(np.uint8)
        v8 = rng.integers(0, 0x78, (1, skv, hkv, d), dtype=np.uint8)
        k_scale, v_scale = np.array([0.5, 0.125], np.float32), np.array([2.0, 0.25], np.float32)
        k16 = (vals[k8] * k_scale[None, None, :, None]).astype(np.float16)
        v16 = (vals[v8] * v_scale[None, None, :, None]).astype(np.float16)
        ctx = qfuse.Context("cpu")
        o, want = np.empty((1, sq, hq, d), np.float32), np.empty((1, sq, hq, d), np.float32)
        lse, want_lse = np.empty((1, hq, sq), np.float32), np.empty((1, hq, sq), np.float32)
        ctx.attention(q, qfuse.view(k8, "e4m3fn"), qfuse.view(v8, "e4m3fn"), o, lse=lse, causal=True,
                      k_scale=k_scale, v_scale=v_scale)
        ctx.attention(q, k16, v16, want, lse=want_lse, causal=True)
        np.testing.assert_array_equal(o, want)
        np.testing.assert_array_equal(lse, want_lse)
        page = 4
        k_cache = k8.reshape(2, page, hkv, d)[::-1].copy()
        v_cache = v8.reshape(2, page, hkv, d)[::-1].copy()
        o2 = np.empty_like(o)
        ctx.attention_paged(q, qfuse.view(k_cache, "e4m3fn"), qfuse.view(v_cache, "e4m3fn"), np.array([[1, 0]], np.int32),
                            np.array([skv], np.int32), o2, causal=True, k_scale=k_scale, v_scale=v_scale)
        np.testing.assert_array_equal(o2, o)
        with self.assertRaises(qfuse.QfuseError):  # scales with 16-bit keys
            ctx.attention(q, k16, v16, o, k_scale=k_scale)
        # Appending the fp16 values to an e4m3fn cache with the same scales gives back the codes.
        cache_k, cache_v = np.zeros((2, page, hkv, d), np.uint8), np.zeros((2, page, hkv, d), np.uint8)
        slots = np.array([4 + j if j < 4 else j - 4 for j in range(skv)], np.int32)
        ctx.attention_cache_append(k16[0], v16[0], slots, qfuse.view(cache_k, "e4m3fn"), qfuse.view(cache_v, "e4m3fn"),
                                   k_scale=k_scale, v_scale=v_scale)
        np.testing.assert_array_equal(cache_k, k_cache)
        np.testing.assert_array_equal(cache_v, v_cache)


class TestNvfp4(unittest.TestCase):
    def test_quant_pack_gemm(self):
        # uint8 bytes viewed as e2m1x2 (shape in values); the GEMM against the formula on the
        # codes as stored, decoded here from the e2m1 definition.
        rng = np.random.default_rng(3)
        n, k, m = 32, 64, 3
        w = rng.standard_normal((n, k)).astype(np.float32)
        ts = np.array([np.abs(w).max() / (6 * 448)], np.float32)
        codes = np.zeros((n, k // 2), np.uint8)
        packed = np.zeros((n, k // 2), np.uint8)
        scales = np.zeros((n, k // 16), np.uint8)
        ctx = qfuse.Context("cpu")
        ctx.quant_nvfp4(w, ts, qfuse.view(codes, "e2m1x2"), qfuse.view(scales, "e4m3fn"))
        ctx.nvfp4_pack(qfuse.view(codes, "e2m1x2"), qfuse.view(packed, "e2m1x2"))
        e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
        nib = np.stack([codes & 15, codes >> 4], axis=-1).reshape(n, k)
        wq = e2m1[nib] * np.repeat(e4m3fn_values()[scales], 16, axis=1) * float(ts[0])
        self.assertLess(np.linalg.norm(wq - w) / np.linalg.norm(w), 0.12)
        self.assertEqual(scales.max(), 0x7E)  # the largest block gets 448
        a = rng.standard_normal((m, k)).astype(np.float32)
        a16 = a.astype(np.float16)
        d = np.empty((m, n), np.float32)
        ctx.gemm_nvfp4(a16, qfuse.view(packed, "e2m1x2"), qfuse.view(scales, "e4m3fn"), ts, d)
        np.testing.assert_allclose(d, a16.astype(np.float64) @ wq.T, rtol=1e-6, atol=1e-6)
        with self.assertRaises(qfuse.QfuseError):  # K = 48: not a multiple of 32, d untouched
            d2 = np.full((m, n), 7.0, np.float32)
            ctx.gemm_nvfp4(a16[:, :48], qfuse.view(packed[:, :24], "e2m1x2"), qfuse.view(scales[:, :3], "e4m3fn"), ts, d2)
        self.assertTrue((d2 == 7.0).all())


if __name__ == "__main__":
    unittest.main()
