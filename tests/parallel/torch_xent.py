#!/usr/bin/python3
"""torch_xent.py - checks Loom's vocab-parallel cross entropy (PARALLEL.md 3.3) against
PyTorch's torch.nn.functional.cross_entropy(label_smoothing=0.1, ignore_index=-100,
reduction='none'), loss and gradient, in float64 to 1e-10.

The gtest case XentTorch.DumpForTorch (tests/parallel/test_xent.cc) runs a tp=3 forward and
backward with uneven vocabSplits and, when LOOM_TORCH_XENT_DIR is set, writes there:
  meta.txt    "N V eps ignore_index"
  logits.bin  [N, V] float64, the whole vocabulary
  target.bin  [N] int64
  dloss.bin   [N] float64, the incoming gradient of the loss
  loss.bin    [N] float64, Loom's loss
  grad.bin    [N, V] float64, Loom's gradient (every rank's columns)

Usage:
  torch_xent.py LOOM_PARALLEL_TESTS   run the gtest case into a temporary folder, then check
  torch_xent.py --dir DIR             check files already written to DIR

Exit status: 0 when Loom agrees with torch, 1 when not, 77 (ctest's skip) without torch.
Meant for Debian's /usr/bin/python3 with python3-torch (CPU).
"""
import array
import os
import subprocess
import sys
import tempfile

TOL = 1e-10
SKIP = 77


def read(path, code, count):
    a = array.array(code)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if len(a) != count:
        sys.exit("%s: %d values, expected %d" % (path, len(a), count))
    return a


def run_gtest(binary, out_dir):
    env = dict(os.environ, LOOM_TORCH_XENT_DIR=out_dir)
    cmd = [binary, "--gtest_filter=XentTorch.DumpForTorch"]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=240)
    if done.returncode != 0 or not os.path.exists(os.path.join(out_dir, "grad.bin")):
        sys.stdout.write(done.stdout)
        sys.exit("%s failed (status %d) or wrote nothing to %s" % (" ".join(cmd),
                                                                   done.returncode, out_dir))


def max_rel(got, want):
    """max |got - want| / max(1, |want|); NaN anywhere counts as a failure."""
    import torch
    if torch.isnan(got).any() or torch.isnan(want).any():
        return float("inf")
    return ((got - want).abs() / want.abs().clamp(min=1.0)).max().item()


def check(d):
    import torch
    import torch.nn.functional as F
    with open(os.path.join(d, "meta.txt")) as f:
        n, v, eps, ignore = f.read().split()
    n, v, eps, ignore = int(n), int(v), float(eps), int(ignore)
    logits = torch.tensor(read(os.path.join(d, "logits.bin"), "d", n * v),
                          dtype=torch.float64).reshape(n, v)
    target = torch.tensor(read(os.path.join(d, "target.bin"), "q", n), dtype=torch.int64)
    dloss = torch.tensor(read(os.path.join(d, "dloss.bin"), "d", n), dtype=torch.float64)
    loss = torch.tensor(read(os.path.join(d, "loss.bin"), "d", n), dtype=torch.float64)
    grad = torch.tensor(read(os.path.join(d, "grad.bin"), "d", n * v),
                        dtype=torch.float64).reshape(n, v)

    z = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(z, target, label_smoothing=eps, ignore_index=ignore, reduction="none")
    (ref * dloss).sum().backward()
    ignored = int((target == ignore).sum().item())
    e_loss = max_rel(loss, ref.detach())
    e_grad = max_rel(grad, z.grad)
    print("torch %s: N=%d V=%d eps=%g ignore_index=%d (%d ignored tokens), |logits| <= %.1f"
          % (torch.__version__, n, v, eps, ignore, ignored, logits.abs().max().item()))
    print("max relative difference: loss %.3g, gradient %.3g (tolerance %g)"
          % (e_loss, e_grad, TOL))
    ok = e_loss <= TOL and e_grad <= TOL and ignored > 0
    if ignored == 0:
        print("the dump has no ignored token: it does not exercise ignore_index")
    return 0 if ok else 1


def main(argv):
    try:
        import torch  # noqa: F401
        import torch.nn.functional  # noqa: F401
    except ImportError as e:
        print("SKIPPED: torch is not importable by %s (%s); install python3-torch"
              % (sys.executable, e))
        return SKIP
    if len(argv) == 3 and argv[1] == "--dir":
        return check(argv[2])
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with tempfile.TemporaryDirectory(prefix="loom-torch-xent-") as d:
        run_gtest(argv[1], d)
        return check(d)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
