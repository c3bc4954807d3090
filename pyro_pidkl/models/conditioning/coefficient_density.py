r"""The model's own density of its learned coefficients beside the data's likelihood, as
the exact-ODE referee scores it (:mod:`~pyro_pidkl.models.conditioning.referee`): each
coefficient's prior (declared, or the weak default) and what a user's ``model()`` adds
(:mod:`~pyro_pidkl.models.conditioning.edits`), their values, derivatives and curvature at
given coefficients."""

import contextlib
import math

import numpy as np
import torch

from ...infer.laplace import parameters_at
from .edits import edit_sites, edits_at, edits_log_density

__all__ = []


@contextlib.contextmanager
def _unvalidated():
    """Distributions' arguments not validated inside the block: a coefficient the exact fit
    ran to the edge of its support (a rate at 0) has log prior ``-inf``, not an error."""
    keep = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(keep)


def _log_prior(model, values):
    """The coefficients' log prior at ``values`` ``{name: float}`` (``-inf`` outside its
    support), and what a user's ``model()`` adds there
    (:func:`~pyro_pidkl.models.conditioning.edits.edits_log_density`): the model's own
    density of its coefficients beside the data's likelihood."""
    tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
    unconstrained = []
    for (n, owner, p), t in zip(model._coefficients(), tensors):
        transform = torch.distributions.transform_to(owner.specs[p].constraint)
        unconstrained.append(transform.inv(torch.tensor(values[n], dtype=t.dtype)).reshape(
            t.shape))
    with torch.no_grad(), parameters_at(tensors, unconstrained), _unvalidated():
        value = float(model.coefficient_log_prior())
        if math.isfinite(value):
            value += edits_at(model, tensors, unconstrained)
    return value if math.isfinite(value) or value == -math.inf else -math.inf


def _posterior_differs(model):
    """Whether the model's density of its coefficients is other than the weak default priors
    the exact fit's least squares carries: a declared prior, or a user's added factor."""
    specs = [owner.specs[p] for _, owner, p in model._coefficients()]
    return any(spec.prior is not None for spec in specs) or bool(edit_sites(model))


def _normal_prior(model):
    """``(loc, sd)`` of the coefficients' weak default priors (normal in the unconstrained
    space), for the exact fit's MAP, or ``None`` where a coefficient has a declared prior or
    ``model()`` adds a factor (then the exact fit is the likelihood's, moved to the model's
    own posterior afterwards: ``referee._fit_problem``)."""
    from .parameter_uncertainty import COEFFICIENT_PRIOR_SD
    if _posterior_differs(model):
        return None
    specs = [owner.specs[p] for _, owner, p in model._coefficients()]
    loc = [float(torch.distributions.transform_to(spec.constraint).inv(spec.init))
           for spec in specs]
    return np.array(loc), np.full(len(loc), COEFFICIENT_PRIOR_SD)


def _prior_hessian(model, theta):
    """The Hessian ``(P, P)`` of the coefficients' negative log prior at unconstrained
    ``theta`` (the weak default or the declared priors, as the GP's Laplace has them), and of
    what a user's ``model()`` adds (:func:`_added_density`'s curvature)."""
    return _added_density(model, theta)[2]


def _added_density(model, theta):
    r"""``(value, grad, hessian)`` over the unconstrained coefficients ``theta`` of the
    model's negative log density of them beside the data: its priors (declared, or the
    weak default) and what a user's ``model()`` adds
    (:func:`~pyro_pidkl.models.conditioning.edits.edits_log_density`)."""
    from ...infer.laplace import _hessian_of
    tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
    values = [torch.full_like(t, float(v)) for t, v in zip(tensors, theta)]

    def negative():
        extra = edits_log_density(model)
        total = -model.coefficient_log_prior()
        return total if extra is None else total - extra
    with parameters_at(tensors, values), _unvalidated():
        with torch.enable_grad():
            value = negative()
            grads = torch.autograd.grad(value, tensors, allow_unused=True)
        H = _hessian_of(negative, tensors)
    grad = np.array([0.0 if g is None else float(g.sum()) for g in grads])
    H = H.numpy()
    return float(value.detach()), grad, np.where(np.isfinite(H), H, 0.0)
