"""GP models, in layers: ``data`` (outputs' data), ``pidkl/`` (PI-DKL and its baselines),
``conditioning/`` (the conditioned models' parts), ``single/`` and ``system/`` (the GPs
conditioned on one equation and on a system)."""

from ..physics.collocation import collocation_points
from .conditioning import (ConvergenceWarning, GaussNewtonResult, Referee, RefereeWarning,
                           SparseCholeskySolver, SparseSolveResult, exact_fit)
from .pidkl import (DKL, LFM, PIDKL, SKL, ExactGP, GPModel, SparseGP, SparsePIDKL,
                    SystemPIDKL)
from .single import PhysicsConditionedGP
from .system import ConditionedSystemGP

__all__ = ["ConditionedSystemGP", "ConvergenceWarning", "DKL", "ExactGP", "GaussNewtonResult",
           "GPModel", "LFM", "PIDKL", "PhysicsConditionedGP", "Referee", "RefereeWarning",
           "SKL", "SparseCholeskySolver", "SparseGP", "SparsePIDKL", "SparseSolveResult",
           "SystemPIDKL", "collocation_points", "exact_fit"]
