"""One torch thread in a process forked from one that has used torch's thread pool.

GNU OpenMP, torch's intra-op pool on Linux, is not fork-safe: a child forked after the
parent ran a parallel region (a matrix product is enough) inherits the pool's
bookkeeping but not its threads, and its first parallel region waits for them forever.
Gymnasium's ``AsyncVectorEnv`` and Stable-Baselines3's ``SubprocVecEnv`` with the
``fork`` start method make exactly such children. A child that runs torch on one
thread never enters the pool (PyTorch's own ``DataLoader`` workers do the same); a
child that wants more threads can be started with ``spawn`` or ``forkserver``
instead (``gym.make_vec(..., vector_kwargs={"context": "spawn"})``). Standard library
only: the hook costs nothing where torch is never imported.
"""

from __future__ import annotations

import os
import sys

_installed = False


def one_torch_thread_in_child() -> None:
    """After a fork: torch (if this process has imported it) runs on one thread."""
    torch = sys.modules.get("torch")
    set_num_threads = getattr(torch, "set_num_threads", None)
    if set_num_threads is not None:  # (a partly imported torch has none yet)
        set_num_threads(1)


def install() -> None:
    """Register `one_torch_thread_in_child` to run in every forked child (once)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=one_torch_thread_in_child)
        _installed = True
