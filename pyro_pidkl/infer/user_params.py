r"""A user's ``pyro.param`` sites in a model's ``model()``: learned by the fit, kept with the
model, readable the Pyro way afterwards.

The fits clear Pyro's global parameter store before and after they run, so that several
models can be fitted and compared in one process: a model's own parameters live in its
tensors (:class:`~pyro.nn.PyroModule`), not in the store. A ``pyro.param`` a user adds to
``model()`` (a learned physics weight, say) lives only in the store, and a clear loses it.
So every clear goes through :func:`clear_store`: the store's sites that are not the model's
own tensors are first kept on the model (``model._user_params``: name ->
``(unconstrained tensor, constraint)``), then the store is cleared, then they are put back
(:func:`put_user_params`), the same tensors, so that the optimiser goes on with them. After
the fit they stay in the store (``pyro.param(name)`` reads them) and on the model
(:func:`user_params`), and each of the model's pure methods (predictions, the training
objective) sees them in its own scope of the store
(:func:`~pyro_pidkl.param_scope.own_parameters`).
"""

import pyro
import torch

from ..param_scope import put_user_params

__all__ = ["clear_store", "keep_user_params", "put_user_params", "user_params"]


def keep_user_params(model):
    """Keep the store's sites that are not ``model``'s own tensors on the model."""
    store = pyro.get_param_store()
    kept = model.__dict__.setdefault("_user_params", {})
    mine = {id(p) for p in model.parameters()} if hasattr(model, "parameters") else set()
    for name in list(store.keys()):
        u = store._params[name]
        if name in kept or id(u) not in mine:
            kept[name] = (u, store._constraints[name])


def clear_store(model=None, keep=True):
    """``pyro.clear_param_store()`` that keeps the user's sites of ``model`` (module
    docstring); ``keep=False`` at a fit's start, where what the store holds is not the
    model's (another model's fit left its sites there)."""
    if model is not None and keep:
        keep_user_params(model)
    pyro.clear_param_store()
    if model is not None:
        put_user_params(model)


def user_params(model):
    """The user's ``pyro.param`` sites of a fitted ``model``: ``{name: constrained value}``
    (detached)."""
    out = {}
    for name, (u, constraint) in getattr(model, "_user_params", {}).items():
        with torch.no_grad():
            out[name] = torch.distributions.transform_to(constraint)(u).detach().clone()
    return out
