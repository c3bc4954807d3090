"""How many torch threads a fit runs with.

torch starts one thread per core. On a two-core machine a fit of this library's sizes gains
little from the second thread when the machine is quiet and loses a factor of two to three
when anything else keeps a core busy (``benchmarks/threads.py``, ``docs/speed.md``: the
README's equation 1.5 s with one thread, 2.3 s with two on a quiet machine, 1.9 s against
6.2 s on a busy one; N = 1000 data 15 s against 13 s quiet, 18 s against 27 s busy). So a fit
runs with one thread by default, for its own duration only, unless the problem is large or
a thread count is set in the environment; the process's setting is put back when the fit
ends, and :class:`~pyro_pidkl.infer.svi.FitResult` records the count it ran with.
"""

import contextlib
import os

import torch

__all__ = ["LARGE_PROBLEM", "fit_threads", "problem_size", "torch_threads"]

#: problems with more rows than this (data plus collocation points) keep torch's threads:
#: dense factorisations of that size gain from several cores
LARGE_PROBLEM = 8000

#: environment variables that set a thread count: "auto" then keeps torch's setting
_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def problem_size(model):
    """Rows of the model's largest dense matrix, roughly: data plus collocation points."""
    rows = int(getattr(model, "X", torch.empty(0)).shape[0])
    Z = getattr(model, "Z", None)
    if isinstance(Z, torch.Tensor) and Z.dim() == 2:     # a system: E equations at each
        rows += int(Z.shape[0]) * int(getattr(model, "num_equations", 1))
    physics = getattr(model, "physics", None)
    rows += int(getattr(physics, "m", 0) or 0)
    return rows


def fit_threads(model, threads="auto"):
    """The thread count a fit of ``model`` runs with, or ``None`` for torch's setting as it is.

    :param threads: ``"auto"``: ``PIDKL_THREADS`` if set; else torch's setting where
        ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set or the problem has more than
        :data:`LARGE_PROBLEM` rows (:func:`problem_size`); else one thread. ``None``:
        torch's setting as it is (what ``torch.set_num_threads`` chose). A count >= 1:
        that many.
    """
    if threads is None:
        return None
    if threads == "auto":
        chosen = os.environ.get("PIDKL_THREADS")
        if chosen:
            try:
                value = int(chosen)
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"Expected PIDKL_THREADS to be an integer >= 1; got {chosen!r}")
            return value
        if any(os.environ.get(v) for v in _ENVIRONMENT) or problem_size(model) > LARGE_PROBLEM:
            return None
        return 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"Expected threads to be 'auto', None or an integer >= 1; got "
                         f"{threads!r}")
    return threads


@contextlib.contextmanager
def torch_threads(n):
    """Run the block with ``n`` torch threads (``None``: as set), and as many threads of
    the BLAS that numpy and scipy call (``threadpoolctl``: OpenBLAS otherwise keeps a
    thread per core spinning after each call, which doubled a two-core machine's CPU time
    of a state-space fit, ``benchmarks/statespace_speed.py``), then put both back."""
    from threadpoolctl import threadpool_limits
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        with (threadpool_limits(limits=n, user_api="blas") if n is not None
              else contextlib.nullcontext()):
            yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
