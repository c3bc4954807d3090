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

#: public name -> the subpackage that defines it
_SOURCES = {
    "coverage": "diagnostics", "crps": "diagnostics", "nrmse": "diagnostics",
    "relative_l2_error": "diagnostics", "rmse": "diagnostics",
    "test_log_predictive_density": "diagnostics", "Adequacy": "diagnostics",
    "ModelMisfitWarning": "diagnostics", "UnfittedModelWarning": "checks",
    "FitDivergedError": "errors", "NotPositiveDefiniteError": "errors", "PIDKLError": "errors",
    "SolverRefusedError": "errors",
    "GPPosterior": "gp", "PosteriorDraw": "physics", "cho_solve": "gp", "logdet": "gp",
    "quad_diag": "gp",
    "CVResult": "infer", "Ensemble": "infer", "FitResult": "infer", "PriorGuideELBO": "infer",
    "cross_validate": "infer", "default_elbo": "infer", "fit": "infer", "fit_lbfgs": "infer",
    "fit_restarts": "infer", "holdout_split": "infer", "kfold_splits": "infer",
    "torch_threads": "infer", "training_objective": "infer",
    "CoefficientSamples": "infer", "fit_coefficient_guide": "infer",
    "sample_coefficients": "infer", "fit_by_shooting": "infer",
    "MLP": "kernels", "feature_jet": "kernels",
    "DKL": "models", "ExactGP": "models", "LFM": "models", "PIDKL": "models",
    "PhysicsConditionedGP": "models", "SKL": "models", "SparseGP": "models",
    "SparsePIDKL": "models", "collocation_points": "models",
    "Box": "physics", "Condition": "physics", "Equation": "physics",
    "EquationSystem": "physics", "ConditionedSystemGP": "models", "boundary_points": "physics", "is_linear": "physics", "Gaussian": "physics", "Parameter": "physics",
    "PhysicsTerm": "physics", "ExplicitODE": "physics", "explicit_ode": "physics",
    "SystemPIDKL": "models", "SystemPhysicsTerm": "physics",
    "SparseCholeskySolver": "models", "Matern72": "kernels",
    "Referee": "models", "RefereeWarning": "models", "exact_fit": "models",
    "ExactFit": "infer", "fit_exact": "infer", "EquationODE": "physics",
    "equation_ode": "physics", "save": "saving", "load": "saving",
    "StateSpaceGP": "statespace",
    "Collocation": "models", "Dense": "models", "GPSource": "models", "GaussianNoise": "models",
    "Inducing": "models", "KnownSource": "models", "LogNormalNoise": "models",
    "NegativeBinomial": "models", "Poisson": "models", "ResidualNoise": "models",
    "SparseCholesky": "models", "ZeroSource": "models",
    "GroupedData": "population", "PerGroup": "population", "PopulationFit": "population",
    "PopulationODE": "population", "Random": "population", "Shared": "population",
    "fit_population": "population",
}
_SUBPACKAGES = ("datasets", "diagnostics", "gp", "infer", "kernels", "models", "physics",
                "population", "statespace")

__all__ = sorted([*_SOURCES, *_SUBPACKAGES, "__version__"])


def __getattr__(name):
    if name in _SUBPACKAGES:
        module = importlib.import_module(f".{name}", __name__)
    elif name in _SOURCES:
        module = getattr(importlib.import_module(f".{_SOURCES[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'pyro_pidkl' has no attribute {name!r}")
    globals()[name] = module
    return module


def __dir__():
    return __all__
