"""PI-DKL and its baselines: the exact GP that carries an optional physics term, PI-DKL on
one output and on a system, the sparse variational GP and PI-DKL, SKL and DKL, the latent
force model."""

from .baselines import DKL, SKL
from .base import GPModel
from .exact_gp import ExactGP
from .lfm import LFM
from .pidkl import PIDKL
from .sparse import SparseGP, SparsePIDKL
from .system import SystemPIDKL

__all__ = ["DKL", "ExactGP", "GPModel", "LFM", "PIDKL", "SKL", "SparseGP", "SparsePIDKL",
           "SystemPIDKL"]
