"""DistributedDataParallel on the loom backend trains as on gloo.

    /usr/bin/python3 tests/torch/test_ddp.py --nranks 2     (PYTHONPATH=<build>/python)

Two copies of one MLP (fixed seed) train for STEPS steps on the same synthetic data, each
rank its own shard: one under DDP on a loom group, one under DDP on a gloo group. Small
buckets make several all-reduces (and futures) per step. At the end both copies must hold
the same parameters within float32 tolerance, every rank the same as rank 0 exactly, and
the loss must have fallen.
"""

import argparse
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 300


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import loom_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("loom", init_method="env://", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
            torch.nn.ReLU(), torch.nn.Linear(64, 4))

    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(16, 4, generator=g)

    def batch(step):
        gen = torch.Generator().manual_seed(10000 * step + rank)
        x = torch.randn(32, 16, generator=gen)
        return x, torch.tanh(x @ teacher)

    def train(group):
        model = DDP(mlp(), process_group=group, bucket_cap_mb=0.004)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        first = last = None
        for step in range(STEPS):
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            first = loss.item() if first is None else first
            last = loss.item()
        return model.module, first, last

    loom_model, loom_first, loom_last = train(dist.group.WORLD)
    gloo_model, _, gloo_last = train(gloo)

    failures = []
    worst = 0.0
    for (name, a), b in zip(loom_model.named_parameters(), gloo_model.parameters()):
        diff = (a - b).abs().max().item()
        worst = max(worst, diff)
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
            failures.append("%s differs from gloo's by up to %g" % (name, diff))
        ref = a.detach().clone()
        dist.broadcast(ref, src=0, group=gloo)
        if not torch.equal(ref, a.detach()):
            failures.append("%s differs from rank 0's" % name)
    if not loom_last < 0.5 * loom_first:
        failures.append("the loss went from %g to %g only" % (loom_first, loom_last))
    print("rank %d: loss %.4f -> %.4f (gloo %.4f), parameters within %.2g of gloo's" % (
        rank, loom_first, loom_last, gloo_last, worst), flush=True)
    for f in failures:
        print("rank %d FAILED %s" % (rank, f), flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return rank_main(args)
    harness.require_backend()
    rc = harness.run_ranks(os.path.abspath(__file__), args.nranks,
                           ["--nranks", str(args.nranks)], timeout_s=540)
    print("PASSED" if rc == 0 else "FAILED", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
