"""Built-in experiments as data: dataset, equation (with its initial values), settings.

Each :class:`Experiment` is one place to read how a number was made. The initial values
of unknown equation parameters are deliberately away from the truth (the paper's code
starts the ODE's B and D at exactly 1).
"""

from dataclasses import dataclass, field
from typing import Callable

from . import datasets, physics
from .domain import Box
from .models import DKL, PIDKL, SKL

__all__ = ["EXPERIMENTS", "Experiment", "build_model"]


@dataclass
class Experiment:
    """A task: ``dataset()`` makes the data, ``equation()`` a fresh equation (initial values
    in ``initial``), and the fit settings used by ``pidkl fit``."""

    name: str
    dataset: Callable
    equation: Callable
    initial: dict
    num_steps: int = 1000
    lr: float = 0.01
    gamma: float = 1.0
    m: int = 10
    domain: dict = field(default_factory=dict)
    description: str = ""


EXPERIMENTS = {
    "ode": Experiment(
        "ode", datasets.first_order_ode,
        lambda: physics.first_order_ode(B=0.5, D=0.5), {"B": 0.5, "D": 0.5},
        num_steps=1000, lr=0.01, gamma=1.0, m=10, domain={"t": (0.0, 1.0)},
        description="1stODE: f' + B f - D = g(t); train t < 0.1, test t in [0.1, 1]"),
    "diffusion": Experiment(
        "diffusion", datasets.diffusion_1d,
        lambda: physics.heat_1d(alpha=1.0), {"alpha": 1.0},
        num_steps=1000, lr=0.01, gamma=1.0, m=10,
        domain={"x": (0.0, 2.0), "t": (0.01, 1.01)},
        description="1dDiffusion: f_t = alpha f_xx; train on the slice t = 0.5"),
}


def build_model(method, experiment, X, y, input_names, gamma=None, m=None, **kwargs):
    """A fresh model of ``method`` ('pidkl', 'dkl', 'skl') for ``experiment`` on ``(X, y)``."""
    names = tuple(input_names)
    if method == "skl":
        return SKL(X, y, input_names=names, **kwargs)
    if method == "dkl":
        return DKL(X, y, input_names=names, **kwargs)
    if method == "pidkl":
        return PIDKL(X, y, experiment.equation(), input_names=names,
                     gamma=experiment.gamma if gamma is None else gamma,
                     m=experiment.m if m is None else m, domain=Box(experiment.domain),
                     **kwargs)
    raise ValueError(f"Unknown method {method!r}; expected one of 'pidkl', 'dkl', 'skl'")
