"""Physics Informed Deep Kernel Learning (PI-DKL) as Pyro model code."""

from . import baselines, datasets, diagnostics, lfm_kernels, physics, plots
from .domain import Box, Gaussian
from .draw import PosteriorDraw, feature_jet
from .ensemble import Ensemble, fit_restarts, training_objective
from .errors import FitDivergedError, NotPositiveDefiniteError, PIDKLError
from .infer import FitResult, fit
from .metrics import coverage, crps, nrmse, rmse, test_log_predictive_density
from .models import (DKL, LFM, PIDKL, SKL, ExactGP, PhysicsConditionedGP, SparsePIDKL,
                     collocation_points)
from .nn import MLP
from .physics import Equation, Parameter
from .posterior import GPPosterior, cho_solve, logdet, quad_diag
from .selection import CVResult, cross_validate, holdout_split, kfold_splits

__version__ = "0.1.0"

__all__ = sorted([
    "Box",
    "CVResult",
    "DKL",
    "Ensemble",
    "Equation",
    "ExactGP",
    "FitDivergedError",
    "FitResult",
    "GPPosterior",
    "Gaussian",
    "LFM",
    "MLP",
    "NotPositiveDefiniteError",
    "PIDKL",
    "PhysicsConditionedGP",
    "PIDKLError",
    "Parameter",
    "PosteriorDraw",
    "SKL",
    "SparsePIDKL",
    "__version__",
    "baselines",
    "cho_solve",
    "collocation_points",
    "coverage",
    "cross_validate",
    "crps",
    "datasets",
    "diagnostics",
    "feature_jet",
    "fit",
    "fit_restarts",
    "holdout_split",
    "kfold_splits",
    "lfm_kernels",
    "logdet",
    "nrmse",
    "physics",
    "plots",
    "quad_diag",
    "rmse",
    "test_log_predictive_density",
    "training_objective",
])
