"""Held-out scores, calibration, ArviZ predictive checks and LOO, and plots."""

from . import plots
from .arviz_tools import compare, exact_loo, loo, to_datatree
from .calibration import LEVELS, pit, predictive_scores
from .metrics import coverage, crps, nrmse, rmse, test_log_predictive_density

__all__ = ["LEVELS", "compare", "coverage", "crps", "exact_loo", "loo", "nrmse", "pit", "plots",
           "predictive_scores", "rmse", "test_log_predictive_density", "to_datatree"]
