"""Held-out scores, calibration, ArviZ predictive checks and LOO, and plots."""

from . import plots
from .arviz_tools import compare, exact_loo, loo, to_datatree
from .calibration import LEVELS, pit, predictive_scores
from .metrics import (coverage, crps, nrmse, relative_l2_error, rmse,
                      test_log_predictive_density)

__all__ = ["LEVELS", "compare", "coverage", "crps", "exact_loo", "loo", "nrmse", "pit", "plots",
           "relative_l2_error",
           "predictive_scores", "rmse", "test_log_predictive_density", "to_datatree"]
