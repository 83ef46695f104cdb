"""Starting the ranks of a torch test: one process each, torchrun's variables, a deadline on
everything. Run with /usr/bin/python3 (Debian's torch); exit 77 means SKIPPED."""

import os
import socket
import subprocess
import sys
import time

SKIP = 77


def skip(reason):
    print("SKIPPED: " + reason, flush=True)
    sys.exit(SKIP)


def loom_env(base=None):
    """The environment a rank needs to import loom_torch."""
    return dict(os.environ if base is None else base)


def require_backend():
    """Skips (77) where torch or its gloo backend is missing or the backend was not built;
    fails where it was built and does not import."""
    if os.environ.get("LOOM_TORCH_BUILT") == "0":
        skip("the torch backend was not built here (cmake's configure said why)")
    try:
        import torch.distributed as dist
    except ImportError as e:
        skip("%s cannot import torch: %s" % (sys.executable, e))
    if not dist.is_available() or not dist.is_gloo_available():
        skip("this torch has no torch.distributed with gloo to compare with")
    probe = subprocess.run([sys.executable, "-c", "import loom_torch"], env=loom_env(),
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        print("FAILED: import loom_torch: " + probe.stderr.strip(), flush=True)
        sys.exit(1)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, nranks, args, timeout_s):
    """Runs `script --rank R args` for each rank under torchrun's variables; returns 0 when
    all exit 0. A rank that fails stops the others; at timeout_s all are killed."""
    port = free_port()
    procs = []
    for rank in range(nranks):
        env = loom_env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, script, "--rank", str(rank)] + args,
                                      env=env))
    deadline = time.monotonic() + timeout_s
    status = 0
    while procs and time.monotonic() < deadline:
        for p in list(procs):
            rc = p.poll()
            if rc is None:
                continue
            procs.remove(p)
            if rc != 0:
                print("a rank exited with %d; stopping the others" % rc, flush=True)
                status = rc
                deadline = min(deadline, time.monotonic() + 10)
        time.sleep(0.05)
    if procs:
        if status == 0:
            print("FAILED: ranks still running after %d s" % timeout_s, flush=True)
            status = 1
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    return status
