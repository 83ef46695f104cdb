"""The "loom" backend of torch.distributed, for CPU tensors.

Importing this package registers the backend, so that

    import loom_torch
    torch.distributed.init_process_group("loom", init_method="env://")

works under torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). Under Loom's own launcher,
loomrun, which sets LOOM_RANK, LOOM_WORLD_SIZE and LOOM_ROOT instead, call
loom_torch.init_process_group(), which fills in torch's variables from Loom's first.

Every operation is enqueued on the group's Loom host stream and returns at once; wait() on
its Work (or async_op=False) completes it. Work.wait() waits for the stream's work issued so
far, not only for its own call. The first failed operation fails the group: its Work and
every later call raise Loom's error text.
"""

import os

import torch.distributed as dist

from ._loom_torch import ProcessGroupLoom, loom_version

__all__ = ["ProcessGroupLoom", "loom_version", "init_process_group", "env_from_loomrun"]

BACKEND = "loom"


def _create(store, rank, world_size, timeout):
    return ProcessGroupLoom(store, rank, world_size, timeout)


def _register():
    # A second import (another copy of the package on the path) must not register twice.
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create)


def env_from_loomrun(environ=None):
    """Sets torch's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT from loomrun's LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK, LOOM_LOCAL_SIZE
    and LOOM_ROOT (host:port), leaving any already set. torch's TCP store listens on
    LOOM_ROOT's port: loomrun chose it free for rank 0, and this backend rendezvouses through
    the store, not through LOOM_ROOT. Returns True when loomrun's variables were there."""
    env = os.environ if environ is None else environ
    if "LOOM_RANK" not in env or "LOOM_WORLD_SIZE" not in env:
        return False
    pairs = {
        "RANK": env["LOOM_RANK"],
        "WORLD_SIZE": env["LOOM_WORLD_SIZE"],
        "LOCAL_RANK": env.get("LOOM_LOCAL_RANK", env["LOOM_RANK"]),
        "LOCAL_WORLD_SIZE": env.get("LOOM_LOCAL_SIZE", env["LOOM_WORLD_SIZE"]),
    }
    root = env.get("LOOM_ROOT")
    if root:
        host, _, port = root.rpartition(":")
        pairs["MASTER_ADDR"] = host.strip("[]")
        pairs["MASTER_PORT"] = port
    for key, value in pairs.items():
        env.setdefault(key, value)
    return True


def init_process_group(backend=BACKEND, **kwargs):
    """torch.distributed.init_process_group with backend "loom" and init_method "env://"
    by default, under torchrun or loomrun alike."""
    env_from_loomrun()
    kwargs.setdefault("init_method", "env://")
    dist.init_process_group(backend, **kwargs)


_register()
