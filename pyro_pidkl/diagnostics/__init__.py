"""Held-out scores, calibration, model adequacy, ArviZ predictive checks and LOO, plots."""

from . import plots
from .adequacy import EVIDENCE_TOL, RESIDUAL_TOL, Adequacy, ModelMisfitWarning
from .arviz_tools import compare, exact_loo, loo, to_datatree
from .calibration import LEVELS, pit, predictive_scores
from .metrics import (coverage, crps, nrmse, relative_l2_error, rmse,
                      test_log_predictive_density)

__all__ = ["Adequacy", "EVIDENCE_TOL", "LEVELS", "ModelMisfitWarning", "RESIDUAL_TOL", "compare", "coverage", "crps", "exact_loo", "loo", "nrmse", "pit", "plots",
           "relative_l2_error",
           "predictive_scores", "rmse", "test_log_predictive_density", "to_datatree"]
