"""torch_mlp.py --dir DIR: PyTorch (CPU, float64, autograd) recomputes the MLP block whose inputs and
Loom results TorchDump.MlpBlock wrote to DIR (a tp-3 sequence-parallel run of libloom_parallel's
column and row linear layers with uneven splits) and compares: output, input gradient and every
weight and bias gradient to relative 1e-10. Exit 0 on agreement, 1 on a mismatch, 77 without torch."""
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the skip code of ctest's SKIP_RETURN_CODE
    print(f"torch_mlp: SKIPPED: {e}")
    sys.exit(77)


def load(d, name, shape=None):
    a = np.fromfile(f"{d}/{name}", dtype=np.float64)
    return torch.from_numpy(a.reshape(shape) if shape else a)


def main(d):
    S, B, H, F = (int(v) for v in load(d, "mlp_shape"))
    x = load(d, "mlp_x", (S, B, H)).requires_grad_()
    w1 = load(d, "mlp_w1", (F, H)).requires_grad_()
    b1 = load(d, "mlp_b1", (F,)).requires_grad_()
    w2 = load(d, "mlp_w2", (H, F)).requires_grad_()
    b2 = load(d, "mlp_b2", (H,)).requires_grad_()
    g = load(d, "mlp_g", (S, B, H))
    h = torch.nn.functional.linear(x, w1, b1)
    y = torch.nn.functional.linear(torch.nn.functional.gelu(h), w2, b2)
    y.backward(g)
    want = {"mlp_y": y.detach(), "mlp_dx": x.grad, "mlp_dw1": w1.grad, "mlp_db1": b1.grad,
            "mlp_dw2": w2.grad, "mlp_db2": b2.grad}
    bad = 0
    for name, ref in want.items():
        got = load(d, name, tuple(ref.shape))
        err = ((got - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
        ok = err <= 1e-10
        bad += not ok
        print(f"torch_mlp: {name[4:]:4s} {tuple(ref.shape)}: max relative difference {err:.2e}"
              f" {'ok' if ok else 'FAIL'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--dir":
        sys.exit("usage: torch_mlp.py --dir DIR (tests/parallel/torch_check.sh runs it)")
    sys.exit(main(sys.argv[2]))
