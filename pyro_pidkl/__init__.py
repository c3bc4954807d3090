"""Physics Informed Deep Kernel Learning (PI-DKL) as Pyro model code.

Subpackages: :mod:`~pyro_pidkl.gp` (posterior, standardiser, posterior draws),
:mod:`~pyro_pidkl.kernels`, :mod:`~pyro_pidkl.physics` (equations, the physics term),
:mod:`~pyro_pidkl.models`, :mod:`~pyro_pidkl.statespace` (explicit ODEs in time in
:math:`O(N)`), :mod:`~pyro_pidkl.infer`, :mod:`~pyro_pidkl.diagnostics`,
:mod:`~pyro_pidkl.datasets`. The paper's study (:mod:`pyro_pidkl.paper`) is not imported.

The names below load on first use (PEP 562), so that ``pidkl --help`` need not import torch.
"""

import importlib

__version__ = "0.1.0"

#: the public API: name -> the subpackage that defines it (one model family, its parts, its
#: solvers, ``fit``, ``save``/``load``, the errors and warnings, the population models)
_SOURCES = {
    # the conditioned models (one family) and the paper's PI-DKL models
    "PhysicsConditionedGP": "models", "ConditionedSystemGP": "models",
    "StateSpaceGP": "statespace", "SparseCholeskySolver": "models",
    "PIDKL": "models", "SparsePIDKL": "models", "SystemPIDKL": "models",
    # the equation and its domain
    "Equation": "physics", "EquationSystem": "physics", "Parameter": "physics",
    "Condition": "physics", "Box": "physics",
    # parts: solvers and collocation, sources, likelihoods
    "Collocation": "models", "Dense": "models", "Inducing": "models",
    "SparseCholesky": "models",
    "GPSource": "models", "KnownSource": "models", "ZeroSource": "models",
    "GaussianNoise": "models", "LogNormalNoise": "models", "NegativeBinomial": "models",
    "Poisson": "models", "ResidualNoise": "models",
    # fitting, the exact-ODE fit, persistence
    "fit": "infer", "exact_fit": "models", "save": "saving", "load": "saving",
    # errors and warnings
    "PIDKLError": "errors", "FitDivergedError": "errors",
    "NotPositiveDefiniteError": "errors", "SolverRefusedError": "errors",
    "ModelMisfitWarning": "diagnostics", "RefereeWarning": "models",
    "UnfittedModelWarning": "checks",
    # many subjects, one law
    "fit_population": "population", "PopulationODE": "population",
    "GroupedData": "population", "Shared": "population", "PerGroup": "population",
    "Random": "population",
}

#: names the package exported before its API was narrowed -> the subpackage that keeps them;
#: ``pk.<name>`` still works (old code runs unchanged) with a DeprecationWarning naming the path
_FORMER = {
    **dict.fromkeys(("coverage", "crps", "nrmse", "relative_l2_error", "rmse",
                     "test_log_predictive_density", "Adequacy"), "diagnostics"),
    **dict.fromkeys(("GPPosterior", "cho_solve", "logdet", "quad_diag"), "gp"),
    **dict.fromkeys(("PosteriorDraw", "PhysicsTerm", "SystemPhysicsTerm", "Gaussian",
                     "is_linear", "boundary_points", "ExplicitODE", "explicit_ode",
                     "EquationODE", "equation_ode"), "physics"),
    **dict.fromkeys(("CVResult", "Ensemble", "FitResult", "PriorGuideELBO", "cross_validate",
                     "default_elbo", "fit_lbfgs", "fit_restarts", "holdout_split",
                     "kfold_splits", "torch_threads", "training_objective",
                     "CoefficientSamples", "fit_coefficient_guide", "sample_coefficients",
                     "fit_by_shooting", "ExactFit", "fit_exact"), "infer"),
    **dict.fromkeys(("MLP", "feature_jet", "Matern72"), "kernels"),
    **dict.fromkeys(("DKL", "ExactGP", "LFM", "SKL", "SparseGP", "collocation_points",
                     "Referee"), "models"),
    "PopulationFit": "population",
}
_SUBPACKAGES = ("datasets", "diagnostics", "gp", "infer", "kernels", "models", "physics",
                "population", "statespace")

__all__ = sorted([*_SOURCES, *_SUBPACKAGES, "__version__"])


def __getattr__(name):
    if name in _SUBPACKAGES:
        value = importlib.import_module(f".{name}", __name__)
    elif name in _SOURCES:
        value = getattr(importlib.import_module(f".{_SOURCES[name]}", __name__), name)
    elif name in _FORMER:
        import warnings
        warnings.warn(f"pyro_pidkl.{name} is pyro_pidkl.{_FORMER[name]}.{name} now "
                      "(the top level keeps the model family, its parts and fit)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(f".{_FORMER[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'pyro_pidkl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
