"""Every operation of the loom backend against the gloo backend, in one run of N ranks.

    /usr/bin/python3 tests/torch/test_ops.py --nranks 3     (PYTHONPATH=<build>/python)

Each rank makes a "loom" group (the default) and a "gloo" group and runs every case on
both with the same inputs. Where gloo lacks an operation or a type, the reference is built
from gloo's other operations (AVG: its SUM over N; reduce-scatter: its all-reduce, cut;
bfloat16: in float32, which holds it exactly; bool: as uint8). Integers and data movement
must match exactly, floating reductions within a few units of the type's last place.
"""

import argparse
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "uint8", "int32", "int64")
DTYPES = INTS + FLOATS + ("bool",)
COUNTS = (1, 7, 1000, 65537)


class Checker:
    def __init__(self, torch, rank):
        self.torch = torch
        self.rank = rank
        self.checks = 0
        self.failures = []

    def tol(self, dtype):
        t = self.torch
        return {t.float16: (1e-2, 1e-2), t.bfloat16: (5e-2, 1e-1),
                t.float32: (1e-5, 1e-5), t.float64: (1e-12, 1e-12)}.get(dtype)

    def same(self, name, got, want, exact=False):
        t = self.torch
        self.checks += 1
        ok = got.dtype == want.dtype and got.shape == want.shape
        if ok:
            tol = None if exact else self.tol(got.dtype)
            if tol is None:
                ok = t.equal(got, want)
            else:
                ok = t.allclose(got.double(), want.double(), rtol=tol[0], atol=tol[1])
        if not ok:
            self.failures.append("%s: loom %s %s, gloo %s %s" % (
                name, got.dtype, got.flatten()[:6].tolist(), want.dtype,
                want.flatten()[:6].tolist()))

    def raises(self, name, fn, text):
        self.checks += 1
        try:
            fn()
        except RuntimeError as e:
            if text in str(e):
                return
            self.failures.append("%s: the error does not say %r: %s" % (name, text, e))
            return
        self.failures.append("%s: no error" % name)


def rank_main(args):
    import torch
    import torch.distributed as dist
    import loom_torch  # noqa: F401 (registers "loom")

    dist.init_process_group("loom", init_method="env://", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checker(torch, rank)
    R = dist.ReduceOp

    def make(dtype, shape, seed, who=None):
        g = torch.Generator().manual_seed(seed * 101 + (rank if who is None else who))
        if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype == torch.uint8:
            return torch.randint(0, 4, shape, generator=g, dtype=dtype)
        return torch.randint(-3, 4, shape, generator=g, dtype=dtype)

    def to_gloo(x):
        return {torch.bfloat16: torch.float32, torch.bool: torch.uint8}.get(x.dtype, x.dtype)

    def gloo_allreduce(x, op):
        """gloo's all-reduce of x (in a type gloo has) with op, as x's type."""
        y = x.to(to_gloo(x), copy=True)
        if x.dtype == torch.bool:
            op = {R.SUM: R.MAX, R.PRODUCT: R.MIN}.get(op, op)
        dist.all_reduce(y, op=op, group=gloo)
        return y.to(x.dtype)

    seed = 0
    for dname in DTYPES:
        dt = getattr(torch, dname)
        is_float = dname in FLOATS
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if is_float:
            ops.append(R.AVG)
        else:
            ops += [R.BAND, R.BOR, R.BXOR]
        for count in COUNTS:
            seed += 1
            x = make(dt, (count,), seed)
            tag = "%s[%d]" % (dname, count)

            for op in ops:
                got = x.clone()
                dist.all_reduce(got, op=op)
                if op == R.AVG:
                    want = (gloo_allreduce(x, R.SUM).double() / n).to(dt)
                else:
                    want = gloo_allreduce(x, op)
                chk.same("all_reduce %s %s" % (op, tag), got, want)

            if is_float:
                factor = 0.5 + rank
                got = x.clone()
                dist.all_reduce(got, op=dist._make_nccl_premul_sum(factor))
                want = gloo_allreduce((x.double() * factor).to(dt), R.SUM)
                chk.same("all_reduce PREMUL_SUM " + tag, got, want)

            # Non-contiguous: a transposed view, written back in place.
            base = make(dt, (3, count), seed + 1000)
            got = base.clone().t()
            dist.all_reduce(got, op=R.MAX)
            want = gloo_allreduce(base.t().contiguous(), R.MAX)
            chk.same("all_reduce non-contiguous " + tag, got.contiguous(), want)

            root = count % n
            got = x.clone()
            dist.broadcast(got, src=root)
            want = x.to(to_gloo(x), copy=True)
            dist.broadcast(want, src=root, group=gloo)
            chk.same("broadcast %s root %d" % (tag, root), got, want.to(dt), exact=True)

            for op in (R.SUM, R.MAX):
                got = x.clone()
                dist.reduce(got, dst=root, op=op)
                want = gloo_allreduce(x, op)
                if rank == root:
                    chk.same("reduce %s %s root %d" % (op, tag, root), got, want)

            want = [torch.empty(count, dtype=to_gloo(x)) for _ in range(n)]
            dist.all_gather(want, x.to(to_gloo(x), copy=True), group=gloo)
            want = torch.cat(want).to(dt)
            got = [torch.empty(count, dtype=dt) for _ in range(n)]
            dist.all_gather(got, x)
            chk.same("all_gather " + tag, torch.cat(got), want, exact=True)
            flat = torch.empty(n * count, dtype=dt)
            dist.all_gather(list(flat.chunk(n)), x)
            chk.same("all_gather into chunks " + tag, flat, want, exact=True)
            flat = torch.empty(n * count, dtype=dt)
            dist.all_gather_into_tensor(flat, x)
            chk.same("all_gather_into_tensor " + tag, flat, want, exact=True)

            big = make(dt, (n * count,), seed + 2000)
            rs_ops = (R.SUM, R.MAX) + ((R.AVG,) if is_float else (R.BXOR,))
            for op in rs_ops:
                if op == R.AVG:
                    full = (gloo_allreduce(big, R.SUM).double() / n).to(dt)
                else:
                    full = gloo_allreduce(big, op)
                want = full[rank * count:(rank + 1) * count]
                got = torch.empty(count, dtype=dt)
                dist.reduce_scatter_tensor(got, big, op=op)
                chk.same("reduce_scatter_tensor %s %s" % (op, tag), got, want)
                got = torch.empty(count, dtype=dt)
                dist.reduce_scatter(got, list(big.chunk(n)), op=op)
                chk.same("reduce_scatter %s %s" % (op, tag), got, want)

            # Uneven all-to-all: rank i sends (i + 2j) % 3 + k rows to rank j.
            width = min(count, 5)
            k = count % 2

            def rows(i, j):
                return (i + 2 * j) % 3 + k

            in_splits = [rows(rank, j) for j in range(n)]
            out_splits = [rows(i, rank) for i in range(n)]
            src = make(dt, (sum(in_splits), width), seed + 3000)
            want = torch.empty((sum(out_splits), width), dtype=to_gloo(src))
            dist.all_to_all_single(want, src.to(to_gloo(src), copy=True), out_splits, in_splits,
                                   group=gloo)
            want = want.to(dt)
            got = torch.empty((sum(out_splits), width), dtype=dt)
            dist.all_to_all_single(got, src, out_splits, in_splits)
            chk.same("all_to_all_single uneven " + tag, got, want, exact=True)
            got = [torch.empty((s, width), dtype=dt) for s in out_splits]
            dist.all_to_all(got, list(src.split(in_splits)))
            chk.same("all_to_all uneven " + tag, torch.cat(got), want, exact=True)
            even = make(dt, (n * 2, width), seed + 4000)
            want = torch.empty_like(even, dtype=to_gloo(even))
            dist.all_to_all_single(want, even.to(to_gloo(even), copy=True), group=gloo)
            got = torch.empty_like(even)
            dist.all_to_all_single(got, even)
            chk.same("all_to_all_single even " + tag, got, want.to(dt), exact=True)

            want = [torch.empty(count, dtype=to_gloo(x)) for _ in range(n)]
            dist.gather(x.to(to_gloo(x), copy=True), want if rank == root else None, dst=root,
                        group=gloo)
            got = [torch.empty(count, dtype=dt) for _ in range(n)]
            dist.gather(x, got if rank == root else None, dst=root)
            if rank == root:
                chk.same("gather %s root %d" % (tag, root), torch.cat(got),
                         torch.cat(want).to(dt), exact=True)

            parts = list(big.chunk(n))
            want = torch.empty(count, dtype=to_gloo(x))
            gparts = [p.to(to_gloo(p), copy=True) for p in parts]
            dist.scatter(want, gparts if rank == root else None, src=root, group=gloo)
            got = torch.empty(count, dtype=dt)
            dist.scatter(got, parts if rank == root else None, src=root)
            chk.same("scatter %s root %d" % (tag, root), got, want.to(dt), exact=True)

            # A ring of sends: each rank to the next, from the one before.
            nxt, prv = (rank + 1) % n, (rank - 1) % n
            want = torch.empty(count, dtype=to_gloo(x))
            reqs = [dist.isend(x.to(to_gloo(x), copy=True), nxt, group=gloo),
                    dist.irecv(want, prv, group=gloo)]
            for r in reqs:
                r.wait()
            got = torch.empty(count, dtype=dt)
            reqs = [dist.isend(x, nxt), dist.irecv(got, prv)]
            for r in reqs:
                r.wait()
            chk.same("send/recv ring " + tag, got, want.to(dt), exact=True)

        # Coalesced: tensors of several sizes reduced as one.
        ts = [make(dt, (c,), seed + 5000 + c) for c in (3, 1, 17)]
        got = [t.clone() for t in ts]
        dist.all_reduce_coalesced(got, op=R.MAX)
        for i, t in enumerate(ts):
            chk.same("all_reduce_coalesced MAX %s[%d]" % (dname, i), got[i],
                     gloo_allreduce(t, R.MAX))

    # Types Loom has no arithmetic for (nor gloo any support) still move, as bytes. Every
    # rank can make every rank's input, so the reference is made here.
    def odd(dt, who):
        g = torch.Generator().manual_seed(7000 + who)
        if dt == torch.int16:
            return torch.randint(-30000, 30000, (9,), generator=g, dtype=dt)
        return torch.complex(torch.randn(9, generator=g), torch.randn(9, generator=g))

    for dt in (torch.int16, torch.complex64):
        name = str(dt).replace("torch.", "")
        mine = odd(dt, rank)
        got = [torch.empty_like(mine) for _ in range(n)]
        dist.all_gather(got, mine)
        want = torch.cat([odd(dt, i) for i in range(n)])
        chk.same("all_gather " + name, torch.cat(got), want, exact=True)
        got = mine.clone()
        dist.broadcast(got, src=n - 1)
        chk.same("broadcast " + name, got, odd(dt, n - 1), exact=True)

    # Asynchrony: several calls in flight, waited for in reverse order and by polling.
    xs = [torch.full((1000,), float(rank + i)) for i in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in xs]
    for w in reversed(works):
        w.wait()
    for i, t in enumerate(xs):
        chk.same("async all_reduce %d" % i, t,
                 torch.full((1000,), float(sum(range(n)) + n * i)))
    t = torch.ones(10)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    chk.same("future value", fut.wait()[0], torch.full((10,), float(n)))
    t = torch.ones(10)
    w = dist.all_reduce(t, async_op=True)
    polls = 0
    while not w.is_completed() and polls < 200000:  # the count is only a deadline
        polls += 1
    chk.same("is_completed", torch.tensor([w.is_completed()]), torch.tensor([True]))
    w.wait()
    chk.same("polled all_reduce", t, torch.full((10,), float(n)))
    dist.barrier()

    # Refusals, each with a message that names the problem (and the group goes on). CUDA
    # tensors are refused too, but Debian's torch has no CUDA to make one with.
    chk.raises("recv without src", lambda: dist.recv(torch.empty(1)), "named peer")
    chk.raises("BAND on float", lambda: dist.all_reduce(torch.ones(2), op=R.BAND),
               "needs an integer")
    chk.raises("int16 sum", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
               "cannot reduce")
    chk.raises("bool AVG",
               lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=R.AVG),
               "not defined for bool")
    t = torch.ones(3)
    dist.all_reduce(t)
    chk.same("all_reduce after refusals", t, torch.full((3,), float(n)))

    # A second loom group over some of the ranks (its own communicator and stream), with
    # calls in flight on both groups at once.
    members = list(range(0, n, 2))
    sub = dist.new_group(members, backend="loom")
    a, b = torch.full((64,), float(rank)), torch.full((64,), float(rank))
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, group=sub, async_op=True) if rank in members else None
    wa.wait()
    chk.same("world group beside a subgroup", a, torch.full((64,), float(sum(range(n)))))
    if wb is not None:
        wb.wait()
        chk.same("subgroup %s" % members, b, torch.full((64,), float(sum(members))))

    dist.barrier(group=gloo)
    dist.destroy_process_group()
    for f in chk.failures[:40]:
        print("rank %d FAILED %s" % (rank, f), flush=True)
    print("rank %d: %d checks, %d failed" % (rank, chk.checks, len(chk.failures)),
          flush=True)
    return 1 if chk.failures else 0


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
