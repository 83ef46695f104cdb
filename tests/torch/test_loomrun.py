"""The loom backend under Loom's launcher: loomrun sets LOOM_RANK, LOOM_WORLD_SIZE and
LOOM_ROOT, and loom_torch.init_process_group() takes torch's variables from them.

    /usr/bin/python3 tests/torch/test_loomrun.py --loomrun build/loomrun
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NRANKS = 3


def rank_main():
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import loom_torch

    loom_torch.init_process_group(timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    ok = rank == int(os.environ["LOOM_RANK"]) and n == int(os.environ["LOOM_WORLD_SIZE"])
    gloo = dist.new_group(backend="gloo")
    x = torch.arange(100, dtype=torch.float32) * (rank + 1)
    got, want = x.clone(), x.clone()
    dist.all_reduce(got)
    dist.all_reduce(want, group=gloo)
    ok = ok and torch.equal(got, want)
    print("rank %d of %d: %s" % (rank, n, "ok" if ok else "FAILED"), flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loomrun", help="the loomrun program")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return rank_main()
    harness.require_backend()
    if not args.loomrun or not os.access(args.loomrun, os.X_OK):
        harness.skip("no loomrun program given (--loomrun)")
    env = harness.loom_env()
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(var, None)
    cmd = [args.loomrun, "-n", str(NRANKS), "--timeout", "240", sys.executable,
           os.path.abspath(__file__), "--child"]
    rc = subprocess.run(cmd, env=env, timeout=280).returncode
    print("PASSED" if rc == 0 else "FAILED (loomrun exited %d)" % rc, flush=True)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
