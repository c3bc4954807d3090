"""Fitting: SVI with divergence checks, restarts, cross-validation, and data-parallel
training."""

from .elbo import PriorGuideELBO
from .exact_fit import ExactFit, fit_exact
from .lbfgs import fit_lbfgs
from .nuts import CoefficientSamples, fit_coefficient_guide, sample_coefficients
from .restarts import Ensemble, fit_restarts, training_objective
from .shooting import ShootingResult, fit_by_shooting
from .selection import CVResult, cross_validate, holdout_split, kfold_splits
from .svi import FitResult, default_elbo, fit, svi_step
from .threads import fit_threads, torch_threads
from .workers import worker_init

__all__ = ["CVResult", "CoefficientSamples", "Ensemble", "ExactFit", "fit_exact", "FitResult", "PriorGuideELBO", "cross_validate",
           "default_elbo", "fit", "ShootingResult", "fit_by_shooting", "fit_coefficient_guide", "fit_lbfgs", "fit_restarts", "fit_threads", "holdout_split",
           "kfold_splits", "sample_coefficients", "svi_step", "torch_threads", "training_objective", "worker_init"]
