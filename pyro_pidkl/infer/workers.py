"""Worker processes that behave: one torch thread each, gone when their parent goes."""

import os

import torch

__all__ = ["worker_init"]


def worker_init(threads=1):
    """Worker initialiser: one torch thread, and on Linux a SIGKILL when the parent dies, so
    that a killed run leaves no orphan computing."""
    torch.set_num_threads(threads)
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        if os.getppid() == 1:            # the parent died before the call
            os._exit(1)
    except (OSError, AttributeError):
        pass
