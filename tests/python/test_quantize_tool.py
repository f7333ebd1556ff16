"""qfuse-quantize (tools/quantize) on .npy files (run by CI): for every format, its files hold the
bytes the API writes for the same weight and options (through the Python binding), its reported
error is that of the decoded weight, the block-scaled weight feeds qf_gemm_fp8_blockscale, and
bad input is refused with a message and no file written. QFUSE_QUANTIZE names the tool's binary."""
import json
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


def bf16_bits(a):
    """float32 values rounded to bfloat16 (nearest even), as uint16 bits."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def save_safetensors(path, tensors, metadata=None, header_edit=None):
    """tensors: name -> (dtype string, array whose bytes are the data)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = metadata
    if header_edit:
        header_edit(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


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

    def assert_same_results(self, fmt, in_a, in_b):
        """fmt run on inputs in_a and in_b writes the same files, byte for byte."""
        extra = ("--iterations", 2) if fmt == "gptvq-2" else ()
        for tag, src in (("a", in_a), ("b", in_b)):
            r = run(fmt, src, self.path(f"{fmt}-{tag}"), *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
        files = sorted(f[len(fmt) + 3:] for f in os.listdir(self.dir.name) if f.startswith(fmt + "-a."))
        self.assertTrue(files)
        for f in files:
            with open(self.path(f"{fmt}-a.{f}"), "rb") as a, open(self.path(f"{fmt}-b.{f}"), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)

    def test_vq_presets(self):
        for preset in ("gptvq-2", "cq-2", "cq-4", "aqlm-3", "quip-4"):
            with self.subTest(preset=preset):
                out = self.path(preset)
                r = run(preset, self.src, out, "--iterations", 3, "--seed", 5, "--threads", 2)  # (the API below: one thread)
                self.assertEqual(r.returncode, 0, r.stderr)
                fmt = self.ctx.vq_format(preset)
                sz = self.ctx.vq_sizes(fmt, 64, 512)
                codes = np.zeros((fmt.residuals, 64, sz.row_bytes), np.uint8)
                books = np.zeros((fmt.residuals, sz.n_books, sz.entries, fmt.vector_size), np.float16)
                scales = np.zeros(64, np.float32) if fmt.row_scale else None
                st = self.ctx.vq_quantize(self.w, fmt, codes, books, scales=scales, iterations=3, seed=5, threads=1)
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
        # a float16 weight gives the files of its float32 copy, byte for byte, in every format
        w16 = self.w[:32, :256].astype(np.float16)
        np.save(self.path("h16.npy"), w16)
        np.save(self.path("h32.npy"), w16.astype(np.float32))
        for fmt in ("gptvq-2", "nvfp4", "fp8-block", "fp8-channel", "int8-channel"):
            with self.subTest(fmt=fmt):
                self.assert_same_results(fmt, self.path("h16.npy"), self.path("h32.npy"))

    def test_fp8_block_floor(self):
        # an all-zero block takes the scale floor, 1e-10 in fp32, and zero codes
        w = np.ones((128, 256), np.float32)
        w[:, 128:] = 0.0
        np.save(self.path("z.npy"), w)
        r = run("fp8-block", self.path("z.npy"), self.path("z"))
        self.assertEqual(r.returncode, 0, r.stderr)
        scales = np.load(self.path("z.scales.npy"))
        self.assertEqual(scales[0, 1], np.float32(1e-10))
        self.assertEqual(scales[0, 0], np.float32(1) / np.float32(448))
        self.assertFalse(np.load(self.path("z.codes.npy"))[:, 128:].any())

    def test_outputs_together(self):
        # an earlier result's files that this format does not write are removed; a result that
        # cannot be written whole leaves none of its files
        out = self.path("o")
        self.assertEqual(run("fp8-channel", self.src, out).returncode, 0)
        r = run("gptvq-2", self.src, out, "--iterations", 2)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(out + ".scales.npy"))
        out = self.path("p")
        os.mkdir(out + ".codebooks.npy")  # where the second file goes
        r = run("gptvq-2", self.src, out, "--iterations", 2)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(sorted(f for f in os.listdir(self.dir.name) if f.startswith("p.")), ["p.codebooks.npy"])

    def test_safetensors(self):
        # a checkpoint's BF16 and F16 tensors give the files of their values saved as .npy
        wb = bf16_bits(self.w)
        w16 = self.w[:32, :256].astype(np.float16)
        ckpt = self.path("model.safetensors")
        save_safetensors(ckpt, {"model.layers.0.mlp.up_proj.weight": ("BF16", wb), "norm.weight": ("F32", self.w[0]),
                                "embed": ("F16", w16)}, metadata={"format": "pt"})
        r = run("--list", ckpt)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["model.layers.0.mlp.up_proj.weight  BF16 [64, 512]",
                                                 "norm.weight  F32 [512]", "embed  F16 [32, 256]"])
        np.save(self.path("wb.npy"), (wb.astype(np.uint32) << 16).view(np.float32))
        np.save(self.path("w16.npy"), w16)
        for fmt in ("gptvq-2", "nvfp4", "fp8-block", "int8-channel"):
            for name, npy in (("model.layers.0.mlp.up_proj.weight", "wb"), ("embed", "w16")):
                with self.subTest(fmt=fmt, tensor=name):
                    self.assert_same_results(fmt, f"{ckpt}:{name}", self.path(npy + ".npy"))

    def test_safetensors_refusals(self):
        good = {"w": ("F32", self.w[:16, :64])}
        def bad_offsets(h):
            h["w"]["data_offsets"][1] -= 4
        def past_end(h):
            h["w"]["data_offsets"] = [0, 1 << 40]
        cases = {
            "missing": (good, None, "x.safetensors:nope", "no tensor 'nope'"),
            "1-D": ({"w": ("F32", self.w[0])}, None, "x.safetensors:w", "2-D"),
            "int8": ({"w": ("I8", np.zeros((16, 64), np.int8))}, None, "x.safetensors:w", "I8"),
            "offsets": (good, bad_offsets, "x.safetensors:w", "data offsets"),
            "past-end": (good, past_end, "x.safetensors:w", "data offsets"),
        }
        for case, (tensors, edit, arg, msg) in cases.items():
            with self.subTest(case=case):
                save_safetensors(self.path("x.safetensors"), tensors, header_edit=edit)
                r = run("nvfp4", self.path(arg), self.path("y"))
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(msg, r.stderr)
        for name, data in (("short", b"\x10\x00"), ("huge", (1 << 40).to_bytes(8, "little") + b"{}"),
                           ("json", (6).to_bytes(8, "little") + b'{"w":}'),
                           ("deep", (130).to_bytes(8, "little") + b'{"__metadata__":' + b"[" * 100 + b"]" * 13 + b"}")):
            with self.subTest(file=name):
                with open(self.path(name + ".safetensors"), "wb") as f:
                    f.write(data)
                for args in (("--list", self.path(name + ".safetensors")),
                             ("nvfp4", self.path(name + ".safetensors:w"), self.path("y"))):
                    r = run(*args)
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertIn(name + ".safetensors", r.stderr)
        self.assertFalse([f for f in os.listdir(self.dir.name) if f.startswith("y.")])

    def test_refusals(self):
        nan = self.w.copy()
        nan[7, 9] = np.nan
        inf = self.w.copy()
        inf[1, 2] = -np.inf
        cases = {
            "3-D": (np.zeros((2, 4, 32), np.float32), "nvfp4", "2-D"),
            "int32": (np.zeros((4, 32), np.int32), "nvfp4", "dtype"),
            "fortran": (np.asfortranarray(self.w), "nvfp4", "Fortran"),
            "k-not-32": (np.ones((16, 48), np.float32), "nvfp4", "K=48"),
            "n-not-16": (np.ones((20, 64), np.float32), "nvfp4", "N=20"),
            "all-zero": (np.zeros((16, 32), np.float32), "nvfp4", "tensor scale"),
            "tiny": (np.full((16, 32), 1e-36, np.float32), "nvfp4", "tensor scale"),
            "gptvq-k": (np.ones((4, 100), np.float32), "gptvq-2", "multiple"),
            "block-n": (np.ones((40, 128), np.float32), "fp8-block", "multiples of 16"),
            "nan-vq": (nan, "gptvq-2", "w[7, 9] = nan"),
            "nan-block": (nan, "fp8-block", "finite"),
            "inf-channel": (inf, "int8-channel", "w[1, 2] = -inf"),
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
        for args in (("fp3",), ("nvfp4", "--iterations"), ("gptvq-2", "--iterations", 0),
                     ("gptvq-2", "--iterations", -5), ("gptvq-2", "--iterations", "4x"), ("gptvq-2", "--seed", -1),
                     ("gptvq-2", "--seed", "99999999999999999999999"), ("nvfp4", "--seed", 3), ("gptvq-2", "--bits", 2),
                     ("gptvq-2", "--threads", 0), ("gptvq-2", "--threads", 257), ("nvfp4", "--threads", 2)):
            with self.subTest(args=args):
                self.assertEqual(run(args[0], self.src, self.path("x"), *args[1:]).returncode, 2)
        self.assertFalse([f for f in os.listdir(self.dir.name) if f.startswith("x.")])
        # malformed files: not .npy, shapes whose sizes overflow, data shorter than the shape
        def npy(name, descr, shape, data=b"", extra=""):
            header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, {extra}}}".encode()
            header += b" " * (-(len(header) + 11) % 64) + b"\n"
            with open(self.path(name), "wb") as f:
                f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data)
        with open(self.path("junk.npy"), "wb") as f:
            f.write(b"not an npy file at all")
        npy("wrap.npy", "|u1", "(3, 6148914691236517205)", b"x" * 64)
        npy("zero.npy", "<f4", "(274877906944, 274877906944)", b"x")
        npy("big.npy", "<f4", "(99999999999999999999999, 4)")
        npy("short.npy", "<f4", "(100000, 100000)", b"x" * 64)
        npy("twice.npy", "<f4", "(2, 32)", b"x" * 256, extra="'shape': (4, 32), ")
        npy("other.npy", "<f4", "(2, 32)", b"x" * 256, extra="'x': \"'shape': (2, 32)\", ")
        for name, msg in (("junk", "not a NumPy"), ("wrap", "elements"), ("zero", "elements"), ("big", "shape"),
                          ("short", "shorter"), ("twice", "repeated"), ("other", "unknown")):
            with self.subTest(file=name):
                r = run("nvfp4", self.path(name + ".npy"), self.path("x"))
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(msg, r.stderr)


if __name__ == "__main__":
    unittest.main()
