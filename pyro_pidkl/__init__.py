"""Physics Informed Deep Kernel Learning (PI-DKL) as Pyro model code.

Subpackages: :mod:`~pyro_pidkl.gp` (posterior, standardiser, posterior draws),
:mod:`~pyro_pidkl.kernels`, :mod:`~pyro_pidkl.physics` (equations, the physics term),
:mod:`~pyro_pidkl.models`, :mod:`~pyro_pidkl.infer`, :mod:`~pyro_pidkl.diagnostics`,
:mod:`~pyro_pidkl.datasets`. The paper's study (:mod:`pyro_pidkl.paper`) is not imported.
"""

from . import datasets, diagnostics, gp, infer, kernels, models, physics
from .diagnostics import coverage, crps, nrmse, rmse, test_log_predictive_density
from .errors import FitDivergedError, NotPositiveDefiniteError, PIDKLError
from .gp import GPPosterior, PosteriorDraw, cho_solve, logdet, quad_diag
from .infer import (CVResult, Ensemble, FitResult, cross_validate, fit, fit_restarts,
                    holdout_split, kfold_splits, training_objective)
from .kernels import MLP, feature_jet
from .models import (DKL, LFM, PIDKL, SKL, ExactGP, PhysicsConditionedGP, SparseGP,
                     SparsePIDKL, collocation_points)
from .physics import Box, Equation, Gaussian, Parameter, PhysicsTerm

__version__ = "0.1.0"

__all__ = [
    "Box", "CVResult", "DKL", "Ensemble", "Equation", "ExactGP", "FitDivergedError",
    "FitResult", "GPPosterior", "Gaussian", "LFM", "MLP", "NotPositiveDefiniteError",
    "PIDKL", "PIDKLError", "Parameter", "PhysicsConditionedGP", "PhysicsTerm", "PosteriorDraw",
    "SKL", "SparseGP", "SparsePIDKL", "__version__", "cho_solve", "collocation_points", "coverage",
    "cross_validate", "crps", "datasets", "diagnostics", "feature_jet", "fit", "fit_restarts",
    "gp", "holdout_split", "infer", "kernels", "kfold_splits", "logdet", "models", "nrmse",
    "physics", "quad_diag", "rmse", "test_log_predictive_density", "training_objective",
]
