"""torch_moe.py --dir DIR: PyTorch (CPU, float64, autograd) recomputes the top-k MoE layer whose
inputs and Loom results TorchDumpMoe.TopKExpertMlps wrote to DIR (libloom_parallel's dispatch,
combine and their backward passes around small expert MLPs, f_e(v) = W2[e] tanh(W1[e] v)) and
compares: the output, and the gradients of the tokens, the routing weights and every expert
weight, to relative 1e-10. Exit 0 on agreement, 1 on a mismatch, 77 without torch."""
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the skip code of ctest's SKIP_RETURN_CODE
    print(f"torch_moe: SKIPPED: {e}")
    sys.exit(77)


def load(d, name, shape=None):
    a = np.fromfile(f"{d}/{name}", dtype=np.float64)
    return torch.from_numpy(a.reshape(shape) if shape else a)


def main(d):
    T, K, E, H, F = (int(v) for v in load(d, "moe_shape"))
    idx = load(d, "moe_idx", (T, K)).long()
    x = load(d, "moe_x", (T, H)).requires_grad_()
    w = load(d, "moe_w", (T, K)).requires_grad_()
    w1 = load(d, "moe_w1", (E, F, H)).requires_grad_()
    w2 = load(d, "moe_w2", (E, H, F)).requires_grad_()
    g = load(d, "moe_g", (T, H))
    rows = []
    for t in range(T):
        acc = torch.zeros(H, dtype=torch.float64)
        for k in range(K):
            e = int(idx[t, k])
            if e >= 0:
                acc = acc + w[t, k] * (w2[e] @ torch.tanh(w1[e] @ x[t]))
        rows.append(acc)
    out = torch.stack(rows)
    out.backward(g)
    want = {"moe_out": out.detach(), "moe_dx": x.grad, "moe_dw": w.grad, "moe_dw1": w1.grad,
            "moe_dw2": w2.grad}
    bad = 0
    for name, ref in want.items():
        got = load(d, name, tuple(ref.shape))
        err = ((got - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
        ok = err <= 1e-10
        bad += not ok
        print(f"torch_moe: {name[4:]:4s} {tuple(ref.shape)}: max relative difference {err:.2e}"
              f" {'ok' if ok else 'FAIL'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--dir":
        sys.exit("usage: torch_moe.py --dir DIR (tests/parallel/torch_check.sh runs it)")
    sys.exit(main(sys.argv[2]))
