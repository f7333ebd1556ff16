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


if __name__ == "__main__":
    unittest.main()
