"""GP models: the PI-DKL hybrid and its baselines."""

from .baselines import DKL, SKL
from .conditioned import PhysicsConditionedGP, collocation_points
from .exact_gp import ExactGP
from .lfm import LFM
from .pidkl import PIDKL
from .variational import SparsePIDKL

__all__ = ["DKL", "ExactGP", "LFM", "PIDKL", "PhysicsConditionedGP", "SKL", "SparsePIDKL",
           "collocation_points"]
