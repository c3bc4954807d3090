"""A model's own scope of Pyro's global parameter store."""

import contextlib
import functools

import pyro

__all__ = ["own_parameters", "put_user_params", "shared_store"]

#: inside :func:`shared_store`, :func:`own_parameters` leaves the global store as it is
_SHARED = [False]


@contextlib.contextmanager
def shared_store():
    """Inside the block, methods under :func:`own_parameters` use the global store as it
    is: an SVI step around them (a guide over a model's parameters) holds the store's
    constrained values, which a scope's save and restore would replace by plain tensors."""
    keep = _SHARED[0]
    _SHARED[0] = True
    try:
        yield
    finally:
        _SHARED[0] = keep


def put_user_params(model):
    """Put the ``pyro.param`` sites a user added to ``model``'s ``model()``, kept on the model
    by its fit (``model._user_params``: name -> ``(unconstrained tensor, constraint)``,
    :mod:`~pyro_pidkl.infer.user_params`), into the store: the same tensors."""
    store = pyro.get_param_store()
    for name, (u, constraint) in getattr(model, "_user_params", {}).items():
        store._params[name] = u
        store._constraints[name] = constraint
        store._param_to_name[u] = name


def own_parameters(method):
    """Run ``method`` in an empty scope of Pyro's global parameter store.

    A :class:`~pyro.nn.PyroModule` called outside a fit reads any value the global store
    holds under its parameters' names, and *adopts* it: after predicting with one model,
    a second model with the same names (``kernel.kern.lengthscale``, ``noise``, ...) would
    predict with, and keep, the first one's values. Inside the scope each model registers,
    and so uses, its own tensors; the store is restored afterwards. A user's ``pyro.param``
    sites kept on the model by its fit (:mod:`~pyro_pidkl.infer.user_params`) are put in
    the scope.
    """
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        if _SHARED[0]:
            return method(*args, **kwargs)
        with pyro.get_param_store().scope():
            if args:                                  # a user's pyro.param sites
                put_user_params(args[0])
            return method(*args, **kwargs)
    return wrapper
