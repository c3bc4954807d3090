"""GP models: exact and sparse GPs that carry an optional physics term, the PI-DKL hybrid,
its baselines, and the GP conditioned on an equation."""

from .base import GPModel
from .baselines import DKL, SKL
from ..physics.collocation import collocation_points
from .conditioned import PhysicsConditionedGP
from .exact_gp import ExactGP
from .lfm import LFM
from .linearised import ConvergenceWarning, GaussNewtonResult
from .pidkl import PIDKL
from .referee import Referee, RefereeWarning, exact_fit
from .sparse import SparseGP, SparsePIDKL
from .sparse_solver import SparseCholeskySolver, SparseSolveResult
from .system import ConditionedSystemGP
from .system_pidkl import SystemPIDKL

__all__ = ["ConditionedSystemGP", "ConvergenceWarning", "DKL", "ExactGP", "GaussNewtonResult", "GPModel", "LFM", "PIDKL", "PhysicsConditionedGP", "Referee", "RefereeWarning", "SKL",
           "SparseCholeskySolver", "SparseGP", "SparsePIDKL", "SparseSolveResult", "SystemPIDKL", "collocation_points", "exact_fit"]
