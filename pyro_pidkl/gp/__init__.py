"""The GP's posterior on standardised data, the standardiser, and a posterior function
draw with closed-form derivatives."""

from .posterior import GPPosterior, cho_solve, jittered_cholesky, logdet, quad_diag
from .posterior_draw import DrawField, PosteriorDraw
from .sparse_cholesky import SparseInverseCholesky, maximin_order
from .standardise import Standardizer

__all__ = ["DrawField", "GPPosterior", "PosteriorDraw", "SparseInverseCholesky", "Standardizer", "cho_solve",
           "jittered_cholesky", "logdet", "maximin_order", "quad_diag"]
