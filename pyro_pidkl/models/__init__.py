"""GP models: the PI-DKL hybrid and its baselines."""

from .baselines import DKL, SKL
from .exact_gp import ExactGP
from .lfm import LFM
from .pidkl import PIDKL
from .variational import SparsePIDKL

__all__ = ["DKL", "ExactGP", "LFM", "PIDKL", "SKL", "SparsePIDKL"]
