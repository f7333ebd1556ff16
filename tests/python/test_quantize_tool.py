"""qfuse-quantize (tools/quantize) on .npy files (run by CI): for every format, its files hold the
bytes the API writes for the same weight and options (through the Python binding), its reported
error is that of the decoded weight, the block-scaled weight feeds qf_gemm_fp8_blockscale, and
bad input is refused with a message and no file written. QFUSE_QUANTIZE names the tool's binary."""
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np

import qfuse

TOOL = os.environ.get("QFUSE_QUANTIZE", "qfuse-quantize")


def e4m3fn_values():
    """Value of every e4m3fn code (NaN for 0x7F and 0xFF)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, (c & 7) / 8
    mag = np.where(e > 0, (1 + m) * 2.0 ** (e - 7), m * 2.0 ** -6)
    vals = np.where(c & 0x80, -mag, mag)
    vals[[0x7F, 0xFF]] = np.nan
    return vals


def run(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=300)


def reported_error(stdout):
    return float(re.search(r"relative squared error ([0-9.e+-]+)", stdout).group(1))


class TestQuantizeTool(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ctx = qfuse.Context("cpu")
        self.w = np.random.default_rng(11).standard_normal((64, 512)).astype(np.float32)
        self.w[3, 5] = 40.0  # an outlier
        self.src = os.path.join(self.dir.name, "w.npy")
        np.save(self.src, self.w)

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_vq_presets(self):
        for preset in ("gptvq-2", "cq-2", "cq-4", "aqlm-3", "quip-4"):
            with self.subTest(preset=preset):
                out = self.path(preset)
                r = run(preset, self.src, out, "--iterations", 3, "--seed", 5)
                self.assertEqual(r.returncode, 0, r.stderr)
                fmt = self.ctx.vq_format(preset)
                sz = self.ctx.vq_sizes(fmt, 64, 512)
                codes = np.zeros((fmt.residuals, 64, sz.row_bytes), np.uint8)
                books = np.zeros((fmt.residuals, sz.n_books, sz.entries, fmt.vector_size), np.float16)
                scales = np.zeros(64, np.float32) if fmt.row_scale else None
                st = self.ctx.vq_quantize(self.w, fmt, codes, books, scales=scales, iterations=3, seed=5)
                np.testing.assert_array_equal(np.load(out + ".codes.npy"), codes)
                np.testing.assert_array_equal(np.load(out + ".codebooks.npy"), books)
                self.assertEqual(os.path.exists(out + ".scales.npy"), scales is not None)
                if scales is not None:
                    np.testing.assert_array_equal(np.load(out + ".scales.npy"), scales)
                back = np.empty_like(self.w)
                self.ctx.vq_dequantize(codes, books, fmt, back, scales=scales)
                rel = float(((back.astype(np.float64) - self.w) ** 2).sum() / (self.w.astype(np.float64) ** 2).sum())
                self.assertAlmostEqual(reported_error(r.stdout) / rel, 1.0, places=3)
                self.assertAlmostEqual(st.rel_mse / rel, 1.0, places=3)
                self.assertIn(f"{sz.bits_per_value:.3f} bits per value", r.stdout)

    def test_nvfp4(self):
        out = self.path("fp4")
        r = run("nvfp4", self.src, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        ts = np.array([np.float64(np.abs(self.w).max()) / (6 * 448)], np.float32)
        codes = np.zeros((64, 256), np.uint8)
        packed = np.zeros((64, 256), np.uint8)
        scales = np.zeros((64, 32), np.uint8)
        self.ctx.quant_nvfp4(self.w, ts, qfuse.view(codes, "e2m1x2"), qfuse.view(scales, "e4m3fn"))
        self.ctx.nvfp4_pack(qfuse.view(codes, "e2m1x2"), qfuse.view(packed, "e2m1x2"))
        np.testing.assert_array_equal(np.load(out + ".tensor_scale.npy"), ts)
        np.testing.assert_array_equal(np.load(out + ".codes.npy"), codes)
        np.testing.assert_array_equal(np.load(out + ".packed.npy"), packed)
        np.testing.assert_array_equal(np.load(out + ".scales.npy"), scales)
        # the decoded weight from the format's definition (e4m3fn scales here are normal numbers or 0)
        e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
        s = scales.astype(np.int64)
        e4m3 = np.where((s >> 3) > 0, (1 + (s & 7) / 8) * 2.0 ** ((s >> 3) - 7), (s & 7) / 8 * 2.0 ** -6)
        nib = np.stack([codes & 15, codes >> 4], axis=-1).reshape(64, 512)
        wq = e2m1[nib] * np.repeat(e4m3, 16, axis=1) * float(ts[0])
        rel = float(((wq - self.w) ** 2).sum() / (self.w.astype(np.float64) ** 2).sum())
        self.assertAlmostEqual(reported_error(r.stdout) / rel, 1.0, places=3)
        self.assertLess(rel, 0.02)

    def test_fp8_block(self):
        # DeepSeek-V3 weight blocks (partial ones at both edges): each block's scale is amax / 448 in
        # fp32 and its codes those qf_quant_per_tensor gives for that scale; the result feeds
        # qf_gemm_fp8_blockscale as its weight and weight scales.
        n, k = 208, 320
        w = np.random.default_rng(4).standard_normal((n, k)).astype(np.float32) * 3.0
        w[150, 300] = -90.0  # an outlier in the last block
        src = self.path("wb.npy")
        np.save(src, w)
        out = self.path("blk")
        r = run("fp8-block", src, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        codes, scales = np.load(out + ".codes.npy"), np.load(out + ".scales.npy")
        self.assertEqual(codes.shape, (n, k))
        self.assertEqual(scales.shape, (2, 3))
        for nb in range(2):
            for kb in range(3):
                blk = np.ascontiguousarray(w[nb * 128:(nb + 1) * 128, kb * 128:(kb + 1) * 128])
                s = np.float32(np.abs(blk).max()) / np.float32(448)
                self.assertEqual(scales[nb, kb], s)
                want = np.zeros(blk.shape, np.uint8)
                self.ctx.quant_per_tensor(blk, np.array([s], np.float32), qfuse.view(want, "e4m3fn"))
                np.testing.assert_array_equal(codes[nb * 128:(nb + 1) * 128, kb * 128:(kb + 1) * 128], want)
        m = 3
        x = np.random.default_rng(5).standard_normal((m, k)).astype(np.float32)
        xq = np.zeros((m, 384), np.uint8)  # (quantized with zeros to a whole last group: the same codes)
        xs = np.zeros((m, 3), np.float32)
        self.ctx.quant_group(np.pad(x, ((0, 0), (0, 384 - k))), qfuse.view(xq, "e4m3fn"), xs, group_size=128)
        xq = np.ascontiguousarray(xq[:, :k])
        d = np.zeros((m, n), np.float32)
        self.ctx.gemm_fp8_blockscale(qfuse.view(xq, "e4m3fn"), xs, qfuse.view(codes, "e4m3fn"), scales, d,
                                     a_scales_row_major=True)
        e4m3 = e4m3fn_values()
        wd = e4m3[codes] * np.repeat(np.repeat(scales, 128, axis=0), 128, axis=1)[:n, :k]
        xd = e4m3[xq] * np.repeat(xs, 128, axis=1)[:, :k]
        np.testing.assert_allclose(d, xd @ wd.T, rtol=1e-5, atol=1e-5)
        self.assertLess(np.linalg.norm(wd - w) / np.linalg.norm(w), 0.05)

    def test_channel(self):
        # per-channel FP8 and INT8 weights of qf_gemm_scaled: qf_quant_token's bytes and scales
        for fmt, dtype, view in (("fp8-channel", np.uint8, "e4m3fn"), ("int8-channel", np.int8, None)):
            with self.subTest(fmt=fmt):
                out = self.path(fmt)
                r = run(fmt, self.src, out)
                self.assertEqual(r.returncode, 0, r.stderr)
                q = np.zeros(self.w.shape, dtype)
                scales = np.zeros(64, np.float32)
                self.ctx.quant_token(self.w, qfuse.view(q, view) if view else q, scales)
                got = np.load(out + ".codes.npy")
                self.assertEqual(got.dtype, dtype)
                np.testing.assert_array_equal(got, q)
                np.testing.assert_array_equal(np.load(out + ".scales.npy"), scales)

    def test_float16_input(self):
        src = self.path("w16.npy")
        np.save(src, self.w[:32, :256].astype(np.float16))
        r = run("nvfp4", src, self.path("h"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(np.load(self.path("h.codes.npy")).shape, (32, 128))

    def test_refusals(self):
        cases = {
            "3-D": (np.zeros((2, 4, 32), np.float32), "nvfp4", "2-D"),
            "int32": (np.zeros((4, 32), np.int32), "nvfp4", "dtype"),
            "fortran": (np.asfortranarray(self.w), "nvfp4", "Fortran"),
            "k-not-32": (np.ones((4, 48), np.float32), "nvfp4", "multiple of 32"),
            "all-zero": (np.zeros((4, 32), np.float32), "nvfp4", "tensor scale"),
            "gptvq-k": (np.ones((4, 100), np.float32), "gptvq-2", "gptvq-2"),
            "block-n": (np.ones((40, 128), np.float32), "fp8-block", "multiples of 16"),
        }
        for name, (arr, fmt, msg) in cases.items():
            with self.subTest(case=name):
                src = self.path("in-" + name + ".npy")
                np.save(src, arr)
                r = run(fmt, src, self.path(name))
                self.assertEqual(r.returncode, 1)
                self.assertIn(msg, r.stderr)
                self.assertFalse([f for f in os.listdir(self.dir.name) if f.startswith(name + ".")])
        self.assertEqual(run("nvfp4", self.path("missing.npy"), self.path("m")).returncode, 1)
        self.assertEqual(run("fp3", self.src, self.path("x")).returncode, 2)
        self.assertEqual(run("nvfp4", self.src, self.path("x"), "--iterations").returncode, 2)
        with open(self.path("junk.npy"), "wb") as f:
            f.write(b"not an npy file at all")
        r = run("nvfp4", self.path("junk.npy"), self.path("j"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a NumPy", r.stderr)


if __name__ == "__main__":
    unittest.main()
