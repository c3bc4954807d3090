"""The GP's posterior on standardised data, the standardiser, and the sparse inverse
Cholesky factor (a posterior function draw as a field the equations read is
:mod:`pyro_pidkl.physics.posterior_draw`)."""

from .posterior import GPPosterior, cho_solve, jittered_cholesky, logdet, quad_diag
from .sparse_cholesky import SparseInverseCholesky, maximin_order
from .standardise import Standardizer

__all__ = ["GPPosterior", "SparseInverseCholesky", "Standardizer", "cho_solve",
           "jittered_cholesky", "logdet", "maximin_order", "quad_diag"]
