r"""Exact GP posterior from one Cholesky factor.

With :math:`K = k(X, X) + \sigma^2 I = L L^\top` and :math:`w = L^{-1} y`,

.. math::
    \log \mathcal{N}(y \mid 0, K) = -\tfrac12 \|w\|^2 - \textstyle\sum_i \log L_{ii}
        - \tfrac N2 \log 2\pi,

    \mu(x) = k(x, X) K^{-1} y, \qquad v(x) = k(x, x) - \|L^{-1} k(X, x)\|^2 .

The same factor :math:`L` serves the marginal likelihood (data term) and the posterior
mean/variance functions used by the physics term, so a training step does one Cholesky.
"""

import math

import torch
from pyro.contrib.gp.util import conditional

from .errors import NonFiniteError, NotPositiveDefiniteError

__all__ = ["GPPosterior", "jittered_cholesky"]


def jittered_cholesky(K, jitter=1e-8, max_jitter=1e-2, what="kernel matrix"):
    r"""Cholesky factor of ``K`` (``(..., n, n)``), escalating a diagonal jitter on failure.

    Tries :math:`K + j I` for :math:`j = 0`, then ``jitter``, ``10 * jitter``, ... up to
    ``max_jitter`` (relative to the mean of the diagonal). Raises
    :class:`~pyro_pidkl.errors.NotPositiveDefiniteError` when even the largest jitter fails,
    and :class:`~pyro_pidkl.errors.NonFiniteError` when ``K`` holds NaN or inf.

    :returns: lower-triangular ``L`` with the shape of ``K``.
    """
    if not torch.isfinite(K).all():
        raise NonFiniteError(
            f"The {what} ({tuple(K.shape)}) contains NaN or inf: the kernel parameters or "
            "the inputs have diverged.")
    L, info = torch.linalg.cholesky_ex(K)
    if not info.any():
        return L
    scale = K.diagonal(dim1=-2, dim2=-1).mean().detach().abs().clamp(min=1e-300)
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    j = jitter
    while j <= max_jitter * (1 + 1e-12):
        L, info = torch.linalg.cholesky_ex(K + (j * scale) * eye)
        if not info.any():
            return L
        j *= 10.0
    raise NotPositiveDefiniteError(
        f"The {what} ({tuple(K.shape)}) is not positive definite: its Cholesky "
        f"factorisation failed even with a relative jitter of {max_jitter:g} added to the "
        f"diagonal (mean diagonal {float(scale):.3g}). Usual causes: duplicated inputs with "
        "a vanishing noise variance, a collapsed lengthscale, or a feature map that maps "
        "distinct inputs to the same features. Raise the noise floor or max_jitter.")


class GPPosterior:
    r"""Posterior of a zero-mean GP given one Cholesky of :math:`K + \sigma^2 I`.

    :param torch.Tensor X: training inputs ``(N, d)`` (in the kernel's units).
    :param torch.Tensor y: training targets ``(N,)``.
    :param kernel: a :mod:`pyro.contrib.gp` kernel.
    :param torch.Tensor noise: noise variance :math:`\sigma^2` (scalar).
    :param float jitter: first relative jitter tried when the Cholesky fails.
    :param float max_jitter: largest relative jitter before giving up.
    """

    def __init__(self, X, y, kernel, noise, jitter=1e-8, max_jitter=1e-2):
        self.X, self.y, self.kernel, self.noise = X, y, kernel, noise
        N = X.shape[0]
        K = kernel(X) + noise * torch.eye(N, dtype=X.dtype, device=X.device)
        self.L = jittered_cholesky(K, jitter, max_jitter, what=f"{N} x {N} matrix K + sigma^2 I")
        self.w = torch.linalg.solve_triangular(self.L, y.unsqueeze(-1), upper=False).squeeze(-1)

    def log_marginal(self):
        r""":math:`\log \mathcal{N}(y \mid 0, K + \sigma^2 I)` (scalar)."""
        N = self.y.shape[0]
        return (-0.5 * self.w.pow(2).sum() - self.L.diagonal().log().sum()
                - 0.5 * N * math.log(2 * math.pi))

    def mean_var(self, Xnew, full_cov=False):
        r"""Posterior mean ``(M,)`` and variance ``(M,)`` (or covariance ``(M, M)``) of
        :math:`f` at ``Xnew`` ``(M, d)``; differentiable in ``Xnew`` and the parameters."""
        return conditional(Xnew, self.X, self.kernel, self.y, None, self.L, full_cov=full_cov)

    def draw(self, eps, min_var=1e-12):
        r"""The posterior function draw :math:`f_\epsilon(x) = \mu(x) + \epsilon \sqrt{v(x)}`.

        :param torch.Tensor eps: standard normal noise broadcastable to the points.
        :returns: a function ``(M, d) -> (M,)``.
        """
        def f(Xnew):
            mu, var = self.mean_var(Xnew)
            return mu + eps * var.clamp(min=min_var).sqrt()
        return f
