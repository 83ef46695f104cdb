"""A failed operation raises from wait() with Loom's own error, and fails the group.

    /usr/bin/python3 tests/torch/test_fault.py     (PYTHONPATH=<build>/python)

Two ranks form a loom group and all-reduce once; then rank 1 exits without a word. Rank 0's
next all-reduce must raise, naming Loom's cause (a peer that went away), well before the
group's 60 s timeout, and every later call must raise at once.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def rank_main(args):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import loom_torch  # noqa: F401

    dist.init_process_group("loom", init_method="env://", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == 1:
        os._exit(0)  # gone, as after a crash: no destroy, no finalize
    ok = True
    start = time.monotonic()
    try:
        w = dist.all_reduce(torch.ones(1000), async_op=True)
        w.wait()
        print("rank 0 FAILED: the all-reduce without rank 1 succeeded", flush=True)
        ok = False
    except RuntimeError as e:
        text = str(e)
        print("rank 0: wait() raised after %.1f s: %s" % (time.monotonic() - start, text),
              flush=True)
        if "loom" not in text or "failed" not in text:
            print("rank 0 FAILED: the error does not carry Loom's text", flush=True)
            ok = False
    try:
        dist.all_reduce(torch.ones(3))
        print("rank 0 FAILED: a call after the failure succeeded", flush=True)
        ok = False
    except RuntimeError as e:
        if "failed earlier" not in str(e):
            print("rank 0 FAILED: a later call raised something else: %s" % e, flush=True)
            ok = False
    os._exit(0 if ok else 1)  # the group's peer is gone: no collective teardown


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return rank_main(args)
    harness.require_backend()
    rc = harness.run_ranks(os.path.abspath(__file__), 2, [], timeout_s=50)
    print("PASSED" if rc == 0 else "FAILED", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
