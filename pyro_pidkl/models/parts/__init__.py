"""The parts a conditioned model takes, each a small object with one idea: how the data
arise (likelihoods), what drives the equation (sources), where it is imposed
(collocation), how tightly (residual), and how the joint is solved (solvers)."""

from .collocation import REFINE_DEFAULT, Collocation, as_collocation
from .likelihoods import (LIKELIHOODS, GaussianNoise, LogNormalNoise, NegativeBinomial, Poisson,
                          as_likelihood)
from .residual import ResidualNoise, as_residual
from .settings import Parts, own_settings, take_parts
from .solvers import Dense, Inducing, SparseCholesky, as_solver
from .sources import GPSource, KnownSource, ZeroSource, as_source

__all__ = ["Collocation", "Dense", "GPSource", "GaussianNoise", "Inducing", "KnownSource",
           "LIKELIHOODS", "LogNormalNoise", "NegativeBinomial", "Parts", "Poisson",
           "REFINE_DEFAULT", "ResidualNoise", "SparseCholesky", "ZeroSource",
           "as_collocation", "as_likelihood", "as_residual", "as_solver", "as_source",
           "own_settings", "take_parts"]
