"""The conditioned models' keywords sorted into parts.

A model's constructor names its parts (``collocation``, ``source``, ``likelihood(s)``,
``solver``) and takes a few settings besides (``residual_noise``, ``objective``,
``newton_tol``, ``newton_max_iter``, ``parameter_uncertainty``, ...). The keywords of
earlier releases, one per field of a part (``design``, ``seed``, ``noise``,
``source_inputs``, ``data_likelihood``, ...), are still accepted: :func:`take_parts` moves
them into their part, and refuses a field given both ways.
"""

from dataclasses import dataclass
from typing import Any

from .collocation import as_collocation
from .likelihoods import GaussianNoise, as_likelihood
from .residual import as_residual
from .sources import as_source
from .solvers import as_solver

__all__ = ["Parts", "own_settings", "take_parts"]

#: each part's older keywords
COLLOCATION_KEYS = ("design", "seed", "collocation_refine", "fit_collocation")
SOURCE_KEYS = {"source_inputs": "inputs", "source_variance": "variance",
               "source_prior": "prior"}
NOISE_KEYS = {"noise": "noise", "noise_floor": "floor", "learn_noise": "learn"}
RESIDUAL_KEYS = ("learn_residual_noise", "residual_noise_floor")
SOLVER_KEYS = ("data_likelihood", "inducing")


@dataclass
class Parts:
    """A model's parts, resolved: ``collocation`` (:class:`~.collocation.Collocation`),
    ``residual`` (:class:`~.residual.ResidualNoise`), ``likelihood`` (the default
    :class:`~.likelihoods.GaussianNoise` or a part), and for one equation ``source`` and
    ``solver`` (``(data_likelihood, inducing)``)."""

    collocation: Any
    residual: Any
    likelihood: Any
    source: Any = None
    solver: Any = None


def own_settings(settings, defaults):
    """A model's own settings: those of ``defaults`` (``{name: default}``) taken out of
    ``settings`` (a dict of its keywords), the defaults filled in."""
    return {**defaults, **{k: settings.pop(k) for k in list(settings) if k in defaults}}


def _pop(settings, keys):
    return {k: settings.pop(k) for k in list(keys) if k in settings}


def _gaussian(likelihood, settings, what):
    """The Gaussian part from ``likelihood`` and the older ``noise*`` keywords."""
    noise = {NOISE_KEYS[k]: v for k, v in _pop(settings, NOISE_KEYS).items()}
    part = as_likelihood(likelihood, what)
    if noise:
        if likelihood is not None:
            raise ValueError(f"Expected the noise in {what} (pk.GaussianNoise(noise=...)) or as "
                             f"noise= / noise_floor= / learn_noise=, not both")
        part = GaussianNoise(**noise)
    return part


def take_parts(settings, collocation=None, likelihood=None, source=None, solver=None,
               what="the likelihood"):
    """The :class:`Parts` of a model from its part arguments and ``settings`` (its other
    keywords, a dict: the older keywords are removed from it; what stays is the model's own
    settings). ``source`` and ``solver`` are for one equation only (``None``: not taken)."""
    residual = as_residual(settings.pop("residual_noise", None),
                           **_pop(settings, RESIDUAL_KEYS))
    parts = Parts(as_collocation(collocation, **_pop(settings, COLLOCATION_KEYS)), residual,
                  _gaussian(likelihood, settings, what))
    if source is not None:
        gp = {SOURCE_KEYS[k]: v for k, v in _pop(settings, SOURCE_KEYS).items()}
        parts.source = as_source(source, **gp)
    if solver is not None:
        parts.solver = as_solver(solver, **_pop(settings, SOLVER_KEYS))
    return parts
