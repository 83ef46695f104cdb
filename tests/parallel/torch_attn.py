"""torch_attn.py --dir DIR: PyTorch (CPU, float64, autograd) recomputes the attention whose inputs
and Loom results TorchDumpCpAttn.ZigzagCausalGqaThreeAlgorithms wrote to DIR (a cp-3 causal
zig-zag run with GQA, Hq 6 and Hkv 3, Dv != D, of loomCpRing, loomCpAllGatherKv and loomCpUlysses,
gathered back into position order) and compares out, lse, dq, dk and dv of each algorithm to
relative 1e-10. The softmax here is torch's (logsumexp, softmax of masked scores), another
formula than Loom's merged blocks. Exit 0 on agreement, 1 on a mismatch, 77 without torch."""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the skip code of ctest's SKIP_RETURN_CODE
    print(f"torch_attn: SKIPPED: {e}")
    sys.exit(77)

TOL = 1e-10


def load(d, name, shape=None):
    a = np.fromfile(f"{d}/{name}", dtype=np.float64)
    return torch.from_numpy(a.reshape(shape) if shape else a)


def reference(d):
    B, S, Hq, Hkv, D, Dv, causal, scale = (v.item() for v in load(d, "cp_shape"))
    B, S, Hq, Hkv, D, Dv = (int(v) for v in (B, S, Hq, Hkv, D, Dv))
    q = load(d, "cp_q", (B, S, Hq, D)).requires_grad_()
    k = load(d, "cp_k", (B, S, Hkv, D)).requires_grad_()
    v = load(d, "cp_v", (B, S, Hkv, Dv)).requires_grad_()
    dout = load(d, "cp_dout", (B, S, Hq, Dv))
    g = Hq // Hkv  # query head h uses key/value head h // g
    qh = q.transpose(1, 2)                                      # [B, Hq, S, D]
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)          # [B, Hq, S, D]
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)          # [B, Hq, S, Dv]
    s = scale * qh @ kh.transpose(-1, -2)                       # [B, Hq, S, S]
    if causal:
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                            # [B, Hq, S]
    out = (torch.softmax(s, dim=-1) @ vh).transpose(1, 2)       # [B, S, Hq, Dv]
    out.backward(dout)
    return {"out": out.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def main(d):
    if not os.path.exists(f"{d}/cp_shape"):
        print("torch_attn: FAIL: no cp_shape in the dump (TorchDumpCpAttn did not run)")
        return 1
    want = reference(d)
    bad = 0
    for algo in ("ring", "allgather", "ulysses"):
        for name, ref in want.items():
            got = load(d, f"cp_{algo}_{name}", tuple(ref.shape))
            if torch.isnan(got).any():
                err = float("inf")
            else:
                err = ((got - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
            ok = err <= TOL
            bad += not ok
            print(f"torch_attn: {algo:9s} {name:3s} {tuple(ref.shape)}: max relative difference "
                  f"{err:.2e} {'ok' if ok else 'FAIL'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--dir":
        sys.exit("usage: torch_attn.py --dir DIR (tests/parallel/torch_check.sh runs it)")
    sys.exit(main(sys.argv[2]))
