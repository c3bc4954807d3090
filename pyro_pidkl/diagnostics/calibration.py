r"""Held-out scores of a Gaussian predictive :math:`y_* \sim \mathcal{N}(\mu_*, s_*^2)`.

* RMSE, nRMSE, CRPS and the mean test log predictive density
  :math:`\tfrac1n \sum_i \log \mathcal{N}(y_i \mid \mu_i, s_i^2)`;
* PIT values :math:`u_i = \Phi((y_i - \mu_i)/s_i)`, uniform under a calibrated model
  (Kolmogorov-Smirnov test of uniformity);
* central-interval coverage at the levels :data:`LEVELS`.
"""

import numpy as np
from scipy import stats

from .metrics import (coverage, crps, nrmse, relative_l2_error, rmse,
                      test_log_predictive_density)

__all__ = ["LEVELS", "pit", "predictive_scores"]

#: central-interval levels whose coverage every record carries
LEVELS = (0.5, 0.8, 0.9, 0.95)


def pit(mean, var, y):
    r"""Probability integral transform :math:`\Phi((y - \mu)/\sqrt{v})` (``(n,)`` array)."""
    mean, var, y = (np.asarray(a, dtype=float).reshape(-1) for a in (mean, var, y))
    return stats.norm.cdf((y - mean) / np.sqrt(var))


def predictive_scores(mean, var, y, levels=LEVELS):
    """Held-out scores of a Gaussian predictive ``N(mean, var)`` (var of y, noise included).

    :returns: dict with ``rmse``, ``nrmse`` (RMSE / sd of y), ``relative_l2``, ``test_lpd``,
        ``crps``, ``coverage``
        ({level: fraction}),
        ``pit_ks_stat`` and ``pit_ks_pvalue`` (KS test of PIT uniformity).
    """
    u = pit(mean, var, y)
    ks = stats.kstest(u, "uniform")
    return {"rmse": rmse(mean, y), "nrmse": nrmse(mean, y),
            "relative_l2": relative_l2_error(mean, y),
            "test_lpd": test_log_predictive_density(mean, var, y), "crps": crps(mean, var, y),
            "coverage": {float(lv): coverage(mean, var, y, lv) for lv in levels},
            "pit_ks_stat": float(ks.statistic), "pit_ks_pvalue": float(ks.pvalue)}
