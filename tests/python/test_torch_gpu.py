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


if __name__ == "__main__":
    unittest.main()
