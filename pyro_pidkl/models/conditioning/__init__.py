"""The parts both conditioned models take: Gauss-Newton on the linearised equation, the
parameters' share of the predictive variance, the collocation's resolution, the stage
referee and its problems, the systems' stages and starts, and the sparse Cholesky solver
for many collocation points."""

from .linearised import ConvergenceWarning, GaussNewtonResult
from .referee import Referee, RefereeWarning, exact_fit
from .sparse_solver import SparseCholeskySolver, SparseSolveResult

__all__ = ["ConvergenceWarning", "GaussNewtonResult", "Referee", "RefereeWarning",
           "SparseCholeskySolver", "SparseSolveResult", "exact_fit"]
