"""Synthetic generators (our own solvers) and loaders of reference ``.mat`` folds."""

from .base import Dataset
from .reference import load_mat_fold, load_reference_diffusion, load_reference_ode
from .synthetic import diffusion_1d, first_order_ode, solve_diffusion_1d, solve_first_order_ode

__all__ = [
    "Dataset",
    "diffusion_1d",
    "first_order_ode",
    "load_mat_fold",
    "load_reference_diffusion",
    "load_reference_ode",
    "solve_diffusion_1d",
    "solve_first_order_ode",
]
