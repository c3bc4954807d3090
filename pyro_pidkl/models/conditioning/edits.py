r"""What a user's edit of ``model()`` adds to a conditioned model, so that every stage of a fit
scores the model the user wrote.

A conditioned model's own story is one factor, ``"data"`` (:math:`\log p(y \mid v)` plus its
priors, :class:`~pyro_pidkl.models.conditioning.conditioned.ConditionedModel`). A subclass may
add sites to it: a ``pyro.factor`` (a prior on a coefficient, a second data set), read at the
same parameters. L-BFGS maximises the whole trace, so the fit honours them; the stages after it
(the Laplace intervals, the exact-ODE referee, a system's stage keeper, NUTS) score the model
through :func:`edits_log_density`, the log density of the sites ``model()`` adds:

.. math::
    \log p_{\text{edits}}(\theta, \eta) = \sum_{s \ne \text{data}} \log p_s ,

evaluated by tracing ``model()`` with the linearisation, the joint and its objective stood in
for (a factor on a coefficient then costs microseconds), or, where an added site reads the
joint (a factor on the posterior itself), by the whole trace. A latent site that the user
samples (with a guide of its own) has no value to score a stage at: :class:`EditNotScorable`,
and the stages that cannot score it stand aside and say so.
"""

import contextlib

import torch
from pyro import poutine

__all__ = ["EditNotScorable", "edit_sites", "edits_at", "edits_log_density"]

#: the model's own sites
OWN_SITES = ("data",)


class EditNotScorable(ValueError):
    """``model()`` adds a latent sample site: a stage scoring the model at a point cannot
    value it."""


class _ReadsJoint(Exception):
    """An added site read the stand-in joint: the whole trace is needed."""


class _Unread:
    """The joint's stand-in: any use of it asks for the whole trace."""

    def __getattr__(self, name):
        raise _ReadsJoint(name)

    def __getitem__(self, key):
        raise _ReadsJoint("[]")


@contextlib.contextmanager
def _stood_in(model):
    """The expensive parts of the model's own story stood in for: ``linearise``, ``joint``
    (an :class:`_Unread`) and ``_objective`` (zero)."""
    zero = torch.zeros((), dtype=model.Z.dtype)
    model.__dict__["linearise"] = lambda *args, **kwargs: (None, None)
    model.__dict__["joint"] = lambda *args, **kwargs: _Unread()
    model.__dict__["_objective"] = lambda *args, **kwargs: zero
    try:
        yield
    finally:
        for name in ("linearise", "joint", "_objective"):
            model.__dict__.pop(name, None)


def _is_edited(model):
    """Whether the model's class rewrites ``model()`` (the conditioned models' own is marked
    ``own_story``)."""
    return not getattr(getattr(type(model), "model", None), "own_story", False)


def _trace(model):
    """The trace of ``model()``: with the stand-ins where the added sites allow it."""
    try:
        with _stood_in(model), poutine.trace() as capture:
            model.model()
        return capture.trace
    except Exception:          # noqa: BLE001 -- an added site read the stand-in (_ReadsJoint),
        pass                   # or a user's code failed on it: the whole trace
    with poutine.trace() as capture:
        model.model()
    return capture.trace


def _added(trace):
    """The sample sites of ``trace`` the model's own story does not have."""
    return [site for name, site in trace.nodes.items()
            if site["type"] == "sample" and name not in OWN_SITES]


def edit_sites(model):
    """The names of the sites a subclass's ``model()`` adds (``[]`` where unedited)."""
    if not _is_edited(model):
        return []
    return [site["name"] for site in _added(_trace(model))]


def edits_log_density(model, latent="refuse"):
    r""":math:`\log p_{\text{edits}}` (module docstring) at the model's current parameters, a
    0-dim tensor with its graph to them, or ``None`` where ``model()`` adds nothing.

    :param str latent: where ``model()`` samples a latent site: ``"refuse"`` (raise
        :class:`EditNotScorable`: a stage that scores the model at a point stands aside) or
        ``"ignore"`` (``None``: the Laplace step and NUTS over the coefficients read the
        model's own objective, its latent sites left to the guide that fitted them)."""
    if not _is_edited(model):
        return None
    sites = _added(_trace(model))
    if not sites:
        return None
    latent_sites = [site["name"] for site in sites if not site["is_observed"]]
    if latent_sites:
        if latent == "ignore":
            return None
        raise EditNotScorable(f"model() samples {', '.join(latent_sites)}, which a stage "
                              f"scoring the model at a point cannot value")
    total = torch.zeros((), dtype=model.Z.dtype)
    for site in sites:
        total = total + site["fn"].log_prob(site["value"]).sum() * site.get("scale", 1.0)
    return total


def edits_at(model, tensors, values):
    r""":math:`\log p_{\text{edits}}` with the unconstrained ``tensors`` at ``values`` (a
    float; ``0.0`` where unedited)."""
    from ...infer.laplace import parameters_at
    with torch.no_grad(), parameters_at(tensors, values):
        value = edits_log_density(model)
    return 0.0 if value is None else float(value)
