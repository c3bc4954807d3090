"""A model's own scope of Pyro's global parameter store."""

import functools

import pyro

__all__ = ["own_parameters"]


def own_parameters(method):
    """Run ``method`` in an empty scope of Pyro's global parameter store.

    A :class:`~pyro.nn.PyroModule` called outside a fit reads any value the global store
    holds under its parameters' names, and *adopts* it: after predicting with one model,
    a second model with the same names (``kernel.kern.lengthscale``, ``noise``, ...) would
    predict with, and keep, the first one's values. Inside the scope each model registers,
    and so uses, its own tensors; the store is restored afterwards.
    """
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with pyro.get_param_store().scope():
            return method(*args, **kwargs)
    return wrapper
