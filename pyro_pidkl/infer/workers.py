"""Worker processes that behave: one torch thread each, gone when their parent goes."""

import os

import torch

__all__ = ["worker_init"]


def worker_init(threads=1):
    """Worker initialiser: one torch thread, Ctrl-C left to the parent, and on Linux a SIGKILL
    when the parent dies, so that a killed run leaves no orphan computing."""
    torch.set_num_threads(threads)
    import signal
    # Ctrl-C reaches the whole process group: the parent handles it (it keeps what finished
    # and stops its workers); a worker interrupted mid-task would only print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore, registered with the parent's
    # resource tracker: a worker stopped with SIGKILL never unregisters it ("leaked semaphore
    # objects" after Ctrl-C). A worker's bars never share a terminal line: a thread lock
    import threading

    from tqdm import tqdm
    tqdm.set_lock(threading.RLock())
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        if os.getppid() == 1:            # the parent died before the call
            os._exit(1)
    except (OSError, AttributeError):
        pass
