"""torch.distributed on Loom against Gloo, side by side in one run.

    PYTHONPATH=<build>/python /usr/bin/python3 perf/torch/bench.py [--ranks 2 4]
        [--min 8] [--max 256M] [--ops all_reduce all_gather] [--rounds 3] [--no-ddp]

For every rank count the ranks start once and hold a "loom" group and a "gloo" group. Each
size runs on both after a warm-up call each: --rounds rounds (default 3), in each of which
both backends run, which goes first alternating, iterations of the blocking call
(async_op=False, the common case) until about 64 MiB have moved (1 at least, 100 at most).
A round's time is the slowest rank's mean over its iterations; the table shows the median
round, which keeps a burst of load on a shared machine out of the figure. all_reduce:
float32 SUM of SIZE bytes. all_gather: the list call (dist.all_gather) into the n chunks of
one uint8 tensor of SIZE bytes (SIZE/n from each rank). The DDP row: one training step
(forward, backward with DDP's bucketed all-reduces, SGD) of an MLP of 6.3M float32
parameters, median of 20 steps after 3 warm-ups.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def show_size(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d%s" % (n // scale, unit)
    return "%dB" % n


def rank_main(args):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import loom_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("loom", init_method="env://", timeout=timedelta(seconds=600))
    groups = {"loom": dist.group.WORLD,
              "gloo": dist.new_group(backend="gloo", timeout=timedelta(seconds=600))}
    ctl = groups["gloo"]
    rank, n = dist.get_rank(), dist.get_world_size()

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
        return t.item()

    def timed(call, nbytes):
        iters = max(1, min(100, (64 << 20) // max(nbytes, 1)))
        dist.barrier(group=ctl)
        start = time.perf_counter()
        for _ in range(iters):
            call()
        return slowest((time.perf_counter() - start) / iters)

    rows = []
    size = args.min
    sizes = []
    while size <= args.max:
        sizes.append(size)
        size *= 2
    for op in args.ops:
        for i, nbytes in enumerate(sizes):
            if op == "all_reduce":
                buf = torch.ones(max(nbytes // 4, 1), dtype=torch.float32)
                calls = {b: (lambda g=g: dist.all_reduce(buf, group=g))
                         for b, g in groups.items()}
            else:
                if nbytes < n:
                    continue
                out = torch.empty(nbytes - nbytes % n, dtype=torch.uint8)
                chunks = list(out.chunk(n))
                mine = torch.full((out.numel() // n,), rank, dtype=torch.uint8)
                calls = {b: (lambda g=g: dist.all_gather(chunks, mine, group=g))
                         for b, g in groups.items()}
            for call in calls.values():
                call()  # warm-up
            times = {"gloo": [], "loom": []}
            for r in range(args.rounds):
                order = ["gloo", "loom"] if (i + r) % 2 == 0 else ["loom", "gloo"]
                for b in order:
                    times[b].append(timed(calls[b], nbytes))
            rows.append((op, nbytes, statistics.median(times["gloo"]),
                         statistics.median(times["loom"])))

    ddp = None
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = {}
        for b in ("gloo", "loom"):
            torch.manual_seed(0)
            model = DDP(torch.nn.Sequential(
                torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                torch.nn.ReLU(), torch.nn.Linear(2048, 512)), process_group=groups[b])
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x, y = torch.randn(32, 512), torch.randn(32, 512)
            steps = []
            for s in range(23):
                dist.barrier(group=ctl)
                start = time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if s >= 3:
                    steps.append(slowest(time.perf_counter() - start))
            ddp[b] = statistics.median(steps)

    if rank == 0:
        print("\n%d ranks (%s)" % (n, os.uname().nodename))
        for op in args.ops:
            print("\n%-10s %10s %12s %12s %8s" % (op, "size", "gloo us", "loom us", "speedup"))
            for o, nbytes, tg, tl in rows:
                if o == op:
                    print("%-10s %10s %12.1f %12.1f %7.2fx" % (
                        "", show_size(nbytes), tg * 1e6, tl * 1e6, tg / tl))
        if ddp:
            print("\n%-21s %12s %12s %8s" % ("DDP step (6.3M par.)", "gloo ms", "loom ms",
                                               "speedup"))
            print("%-21s %12.2f %12.2f %7.2fx" % ("", ddp["gloo"] * 1e3, ddp["loom"] * 1e3,
                                                 ddp["gloo"] / ddp["loom"]))
        sys.stdout.flush()
    dist.barrier(group=ctl)
    dist.destroy_process_group()
    return 0


def launch(args, nranks):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(nranks):
        env = dict(os.environ)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(nranks), OMP_NUM_THREADS="1")
        argv = [sys.executable, os.path.abspath(__file__), "--rank", str(rank),
                "--min", str(args.min), "--max", str(args.max), "--rounds", str(args.rounds),
                "--ops"] + args.ops
        if not args.ddp:
            argv.append("--no-ddp")
        procs.append(subprocess.Popen(argv, env=env))
    deadline = time.monotonic() + args.timeout
    rc = 0
    for p in procs:
        try:
            rc = rc or p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("bench: %d ranks still running after %d s; stopped" % (nranks, args.timeout))
            for q in procs:
                q.kill()
            return 1
    return rc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--min", type=parse_size, default=8)
    p.add_argument("--max", type=parse_size, default=256 << 20)
    p.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather"],
                   choices=["all_reduce", "all_gather"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-ddp", dest="ddp", action="store_false")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per rank count")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        return rank_main(args)
    rc = 0
    for nranks in args.ranks:
        rc = launch(args, nranks) or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
