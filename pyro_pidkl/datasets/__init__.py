"""Synthetic data simulated by the library's own solvers (``simulate_*``), real-data loaders
(Jura, PM2.5, motion capture; the lynx-hare record and the theophylline data, held in
the library) and loaders of
reference ``.mat`` folds."""

from .base import Dataset
from .burgers import cole_hopf, simulate_burgers, solve_burgers
from .heat2d import simulate_heat_2d, solve_heat_2d
from .manufactured import (CLASSES, ManufacturedProblem, manufactured_problem,
                           manufactured_suite)
from .jura import JURA_TASKS, find_jura, jura, load_jura
from .lynx_hare import LYNX_HARE, REFERENCE_POSTERIOR, lynx_hare
from .problems import PROBLEMS, Problem, problem
from .mocap import find_mocap, load_mocap, mocap
from .pm25 import PM25_INPUTS, find_pm25, load_pm25_fold, pm25
from .reference import (PAPER_FOLD_INPUTS, find_fold, load_mat_fold, load_paper_fold,
                        load_reference_diffusion, load_reference_ode)
from .systems import SYSTEMS, SystemProblem, system_problem
from .theophylline import NLME_REFERENCE, THEOPHYLLINE, theophylline
from .synthetic import (simulate_diffusion_1d, simulate_first_order_ode, solve_diffusion_1d,
                        solve_first_order_ode)

__all__ = [
    "NLME_REFERENCE",
    "THEOPHYLLINE",
    "theophylline",
    "SYSTEMS",
    "SystemProblem",
    "system_problem",
    "CLASSES",
    "Dataset",
    "ManufacturedProblem",
    "manufactured_problem",
    "manufactured_suite",
    "JURA_TASKS",
    "LYNX_HARE",
    "REFERENCE_POSTERIOR",
    "lynx_hare",
    "PAPER_FOLD_INPUTS",
    "PM25_INPUTS",
    "PROBLEMS",
    "Problem",
    "simulate_burgers",
    "cole_hopf",
    "find_jura",
    "find_mocap",
    "find_pm25",
    "simulate_heat_2d",
    "jura",
    "load_jura",
    "load_mocap",
    "mocap",
    "load_pm25_fold",
    "pm25",
    "problem",
    "solve_burgers",
    "solve_heat_2d",
    "simulate_diffusion_1d",
    "simulate_first_order_ode",
    "load_mat_fold",
    "load_paper_fold",
    "find_fold",
    "load_reference_diffusion",
    "load_reference_ode",
    "solve_diffusion_1d",
    "solve_first_order_ode",
]
