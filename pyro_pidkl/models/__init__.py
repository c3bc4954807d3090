"""GP models, in layers: ``pidkl/`` (PI-DKL and its baselines), ``parts/`` (the parts a
conditioned model takes: likelihoods, sources, collocation, residual, solvers),
``conditioning/`` (what both conditioned models share), ``single/`` and ``system/`` (the
GPs conditioned on one equation and on a system)."""

from ..physics.collocation import collocation_points
from .conditioning import (ConvergenceWarning, GaussNewtonResult, Referee, RefereeWarning,
                           SparseCholeskySolver, SparseSolveResult, exact_fit)
from .pidkl import (DKL, LFM, PIDKL, SKL, ExactGP, GPModel, SparseGP, SparsePIDKL,
                    SystemPIDKL)
from .parts import (Collocation, Dense, GaussianNoise, GPSource, Inducing, KnownSource,
                    LogNormalNoise, NegativeBinomial, Poisson, ResidualNoise, SparseCholesky,
                    ZeroSource)
from .single import PhysicsConditionedGP
from .system import ConditionedSystemGP

__all__ = ["Collocation", "ConditionedSystemGP", "ConvergenceWarning", "DKL", "Dense",
           "ExactGP", "GPModel", "GPSource", "GaussNewtonResult", "GaussianNoise",
           "Inducing", "KnownSource", "LFM", "LogNormalNoise", "NegativeBinomial",
           "PIDKL", "PhysicsConditionedGP", "Poisson", "Referee", "RefereeWarning",
           "ResidualNoise", "SKL", "SparseCholesky", "SparseCholeskySolver", "SparseGP",
           "SparsePIDKL", "SparseSolveResult", "SystemPIDKL", "ZeroSource",
           "collocation_points", "exact_fit"]
