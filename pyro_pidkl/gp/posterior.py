r"""Exact GP posterior from one Cholesky factor.

With :math:`K = k(X, X) + \sigma^2 I = L L^\top` and :math:`\alpha = K^{-1} y`,

.. math::
    \log \mathcal{N}(y \mid 0, K) = -\tfrac12 y^\top \alpha - \textstyle\sum_i \log L_{ii}
        - \tfrac N2 \log 2\pi,

    \mu(x) = k(x, X) \alpha, \qquad v(x) = k(x, x) - k(x, X) K^{-1} k(X, x) .

The same factor :math:`L` serves the marginal likelihood (data term) and the posterior
mean/variance functions used by the physics term, so a training step does one Cholesky.

Gradients with respect to :math:`K` are written in closed form (:func:`cho_solve`,
:func:`logdet`) instead of being traced back through the Cholesky factor:

.. math::
    \frac{\partial \log|K|}{\partial K} = K^{-1}, \qquad
    C = K^{-1} B:\; \bar K = -K^{-1} \bar C\, C^\top, \quad \bar B = K^{-1} \bar C,

so the backward of a step costs one ``cholesky_inverse`` and triangular solves with as many
right-hand sides as the forward, instead of autograd's two ``N x N`` triangular solves and
an ``N x N`` product per Cholesky plus an ``N x N`` update per solve.
"""

import math

import torch
from pyro.contrib.gp.util import conditional

from ..errors import NonFiniteError, NotPositiveDefiniteError
from ..kernels.deep import feature_map, se_on_all_features
from ..kernels.se import se_gram

__all__ = ["GPPosterior", "cho_solve", "factorise", "jittered_cholesky", "logdet",
           "quad_diag"]


def jittered_cholesky(K, jitter=1e-8, max_jitter=1e-2, what="kernel matrix",
                      return_jitter=False):
    r"""Cholesky factor of ``K`` (``(..., n, n)``), escalating a diagonal jitter on failure.

    Tries :math:`K + j I` for :math:`j = 0`, then ``jitter``, ``10 * jitter``, ... up to
    ``max_jitter`` (relative to the mean of the diagonal). Raises
    :class:`~pyro_pidkl.errors.NotPositiveDefiniteError` when even the largest jitter fails,
    and :class:`~pyro_pidkl.errors.NonFiniteError` when ``K`` holds NaN or inf.

    :returns: lower-triangular ``L`` with the shape of ``K`` (and, with ``return_jitter``,
        the absolute jitter :math:`j` with :math:`L L^\top = K + j I`, a float).
    """
    L, info = torch.linalg.cholesky_ex(K)
    # NaN or inf anywhere in (the lower triangle of) a symmetric K reaches the diagonal of L
    # or stops the factorisation: one check of n numbers instead of n^2
    if not (info.any() | ~torch.isfinite(L.diagonal(dim1=-2, dim2=-1)).all()):
        return (L, 0.0) if return_jitter else L
    if not torch.isfinite(K).all():
        raise NonFiniteError(
            f"The {what} ({tuple(K.shape)}) contains NaN or inf: the kernel parameters or "
            "the inputs have diverged.")
    scale = K.diagonal(dim1=-2, dim2=-1).mean().detach().abs().clamp(min=1e-300)
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    j = jitter
    while j <= max_jitter * (1 + 1e-12):
        L, info = torch.linalg.cholesky_ex(K + (j * scale) * eye)
        if not info.any():
            return (L, float(j * scale)) if return_jitter else L
        j *= 10.0
    raise NotPositiveDefiniteError(
        f"The {what} ({tuple(K.shape)}) is not positive definite: its Cholesky "
        f"factorisation failed even with a relative jitter of {max_jitter:g} added to the "
        f"diagonal (mean diagonal {float(scale):.3g}). Usual causes: duplicated inputs with "
        "a vanishing noise variance, a collapsed lengthscale, or a feature map that maps "
        "distinct inputs to the same features. Raise the noise floor or max_jitter.")


def factorise(K, jitter=1e-8, max_jitter=1e-2, what="kernel matrix"):
    r"""``(K, L, Kinv)`` for the closed-form gradients of :func:`cho_solve`,
    :func:`quad_diag` and :func:`logdet`: ``K`` with any jitter its factorisation needed
    (differentiable), ``L`` its Cholesky factor (:func:`jittered_cholesky`, not
    differentiated), and, while gradients are being recorded, :math:`K^{-1}` once (else
    ``None``): the gradient of :math:`\log|K|` needs it anyway, and it turns every
    :math:`K^{-1} B` of a step, forward and backward, into a matrix product instead of two
    triangular solves. ``K`` ``(..., n, n)``."""
    training = torch.is_grad_enabled() and K.requires_grad
    with torch.no_grad():
        L, j = jittered_cholesky(K, jitter, max_jitter, what=what, return_jitter=True)
        Kinv = torch.cholesky_inverse(L) if training else None
    if j:
        K = K + j * torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    return K, L, Kinv


def _apply_inverse(B, L, Kinv):
    """:math:`K^{-1} B`: a product with ``Kinv`` when given (a GEMM), else two triangular
    solves with ``L``."""
    return Kinv @ B if Kinv is not None else torch.cholesky_solve(B, L)


class _ChoSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K, B, L, Kinv):
        C = _apply_inverse(B, L, Kinv)
        ctx.save_for_backward(L, C, Kinv)
        return C

    @staticmethod
    def backward(ctx, grad_C):
        L, C, Kinv = ctx.saved_tensors
        W = _apply_inverse(grad_C, L, Kinv)                      # K^{-1} grad_C
        # -W C^T, not symmetrised: K is a symmetric function of its parameters, so it and
        # its symmetric part give the same parameter gradients (one N x N op instead of 3)
        grad_K = (-W) @ C.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        return grad_K, (W if ctx.needs_input_grad[1] else None), None, None


class _QuadDiag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K, B, L, Kinv):
        C = _apply_inverse(B, L, Kinv)
        ctx.save_for_backward(C)
        return (B * C).sum(-2)

    @staticmethod
    def backward(ctx, grad):
        (C,) = ctx.saved_tensors
        Cg = C * grad.unsqueeze(-2)
        grad_K = (-Cg) @ C.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        return grad_K, (2 * Cg if ctx.needs_input_grad[1] else None), None, None


class _LogDet(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K, L, Kinv):
        ctx.save_for_backward(L, Kinv)
        return 2 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    @staticmethod
    def backward(ctx, grad):
        L, Kinv = ctx.saved_tensors
        # torch.cholesky_inverse, not scipy's potri (half the flops, but its BLAS threads
        # then compete with torch's: slower steps, measured)
        Kinv = torch.cholesky_inverse(L) if Kinv is None else Kinv
        return grad[..., None, None] * Kinv, None, None


def cho_solve(K, B, L, Kinv=None):
    r""":math:`C = K^{-1} B` from ``L = cholesky(K)`` (``(N, N)``, not differentiated),
    differentiable in ``K`` ``(N, N)`` and ``B`` ``(N, r)`` with the closed-form backward
    :math:`\bar K = -K^{-1}\bar C C^\top`, :math:`\bar B = K^{-1}\bar C`. ``K`` must be a
    symmetric function of whatever it is computed from (a kernel matrix is): the gradient is
    not symmetrised. With ``Kinv`` (:math:`K^{-1}`, not differentiated) both products are
    matrix products instead of triangular solves.
    """
    return _ChoSolve.apply(K, B, L.detach(), None if Kinv is None else Kinv.detach())


def quad_diag(K, B, L, Kinv=None):
    r"""The diagonal of :math:`B^\top K^{-1} B`, ``(r,)`` for ``B`` ``(N, r)``, with the
    closed-form backward :math:`\bar B = 2 C\,\mathrm{diag}(\bar q)`,
    :math:`\bar K = -C\,\mathrm{diag}(\bar q)\,C^\top`, :math:`C = K^{-1}B`: no solve in
    the backward (arguments as :func:`cho_solve`)."""
    return _QuadDiag.apply(K, B, L.detach(), None if Kinv is None else Kinv.detach())


def logdet(K, L, Kinv=None):
    r""":math:`\log|K|` from ``L = cholesky(K)``, differentiable in ``K`` with the
    closed-form gradient :math:`K^{-1}` (``Kinv`` when given, else one
    ``cholesky_inverse``)."""
    return _LogDet.apply(K, L.detach(), None if Kinv is None else Kinv.detach())


class GPPosterior:
    r"""Posterior of a GP with zero or constant mean :math:`c` given one Cholesky of
    :math:`K + \sigma^2 I`:

    .. math:: \mu(x) = c + k(x, X) K^{-1} (y - c), \qquad
              \log p(y) = \log \mathcal{N}(y \mid c\,1, K + \sigma^2 I).

    :param torch.Tensor X: training inputs ``(N, d)`` (in the kernel's units).
    :param torch.Tensor y: training targets ``(N,)``.
    :param kernel: a :mod:`pyro.contrib.gp` kernel.
    :param torch.Tensor noise: noise variance :math:`\sigma^2` (scalar).
    :param float jitter: first relative jitter tried when the Cholesky fails.
    :param float max_jitter: largest relative jitter before giving up.
    :param bool closed_form_gradients: gradients reach ``K`` in closed form (default);
        ``False``: autograd traces them back through the Cholesky factor (the textbook
        route, kept for comparison).
    :param torch.Tensor mean: the constant prior mean :math:`c` (scalar, differentiable), or
        ``None`` (or ``0.``) for a zero mean.

    Attributes: ``y`` the centred targets :math:`y - c` ``(N,)``, ``offset`` :math:`c` (``0.``
    for a zero mean), ``K`` ``(N, N)`` (with any jitter the factorisation needed; differentiable),
    ``L`` its Cholesky factor (not differentiated: gradients reach ``K`` through
    :func:`cho_solve` and :func:`logdet`), ``alpha`` :math:`= K^{-1} y` ``(N,)``, and
    ``Kinv`` :math:`= K^{-1}` when gradients are being recorded (else ``None``), ``features``
    :math:`\phi(X)` and ``feature_map`` :math:`\phi` for a kernel on features (``Warping``
    without output warping; else ``None``).
    """

    def __init__(self, X, y, kernel, noise, jitter=1e-8, max_jitter=1e-2,
                 closed_form_gradients=True, mean=None):
        if isinstance(mean, (int, float)) and mean == 0:
            mean = None
        self.offset = 0.0 if mean is None else mean
        y = y if mean is None else y - mean
        self.X, self.y, self.kernel, self.noise = X, y, kernel, noise
        self.closed_form_gradients = closed_form_gradients
        N = X.shape[0]
        # a kernel on features: keep the features phi(X) for the physics term
        self.features, self.feature_map = None, feature_map(kernel)
        if self.feature_map is not None:
            self.features = self.feature_map(X)
        kern, U = (kernel, X) if self.feature_map is None else (kernel.kern, self.features)
        if (closed_form_gradients and se_on_all_features(kern)
                and U.shape[-1] == kern.input_dim):                   # SE: the backward by hand
            K = se_gram(U / kern.lengthscale, kern.variance, noise)
        else:
            K = kern(U) + noise * torch.eye(N, dtype=X.dtype, device=X.device)
        if not closed_form_gradients:   # autograd through the Cholesky factor throughout
            self.L = jittered_cholesky(K, jitter, max_jitter,
                                       what=f"{N} x {N} matrix K + sigma^2 I")
            self.K, self.Kinv, self._L_autograd = K, None, self.L
            self.w = torch.linalg.solve_triangular(self.L, y.unsqueeze(-1),
                                                   upper=False).squeeze(-1)
            self._alpha = None                  # K^{-1} y: only when asked for
            return
        self.K, self.L, self.Kinv = factorise(K, jitter, max_jitter,
                                              what=f"{N} x {N} matrix K + sigma^2 I")
        self._alpha = self.solve(y.unsqueeze(-1)).squeeze(-1)
        self._L_autograd = None

    @property
    def alpha(self):
        r""":math:`\alpha = K^{-1} (y - c)` ``(N,)``."""
        if self._alpha is None:
            self._alpha = torch.linalg.solve_triangular(
                self.L.T, self.w.unsqueeze(-1), upper=True).squeeze(-1)
        return self._alpha

    def log_marginal(self):
        r""":math:`\log \mathcal{N}(y \mid c\,1, K + \sigma^2 I)` (scalar)."""
        N = self.y.shape[0]
        if self.closed_form_gradients:
            quad, log_det = (self.y * self.alpha).sum(), logdet(self.K, self.L, self.Kinv)
        else:   # w = L^{-1} y
            quad, log_det = self.w.pow(2).sum(), 2 * self.L.diagonal().log().sum()
        return -0.5 * quad - 0.5 * log_det - 0.5 * N * math.log(2 * math.pi)

    def solve(self, B):
        r""":math:`K^{-1} B` for ``B`` ``(N, r)``, differentiable (:func:`cho_solve`)."""
        if not self.closed_form_gradients:
            return torch.cholesky_solve(B, self.L)
        return cho_solve(self.K, B, self.L, self.Kinv)

    def quad_diag(self, B):
        r"""The diagonal of :math:`B^\top K^{-1} B` ``(r,)`` for ``B`` ``(N, r)``,
        differentiable (:func:`quad_diag`)."""
        if not self.closed_form_gradients:
            return (B * torch.cholesky_solve(B, self.L)).sum(-2)
        return quad_diag(self.K, B, self.L, self.Kinv)

    def _factor(self):
        """``L`` differentiable by autograd when gradients are being recorded (for
        :meth:`mean_var` under autograd, e.g. derivatives of any order in the inputs)."""
        if not (torch.is_grad_enabled() and self.K.requires_grad):
            return self.L
        if self._L_autograd is None:
            self._L_autograd = torch.linalg.cholesky(self.K)
        return self._L_autograd

    def mean_var(self, Xnew, full_cov=False):
        r"""Posterior mean ``(M,)`` and variance ``(M,)`` (or covariance ``(M, M)``) of
        :math:`f` at ``Xnew`` ``(M, d)``; differentiable in ``Xnew`` and the parameters."""
        mu, var = conditional(Xnew, self.X, self.kernel, self.y, None, self._factor(),
                              full_cov=full_cov)
        return mu + self.offset, var

    def draw(self, eps, min_var=1e-12):
        r"""The posterior function draw :math:`f_\epsilon(x) = \mu(x) + \epsilon \sqrt{v(x)}`.

        :param torch.Tensor eps: standard normal noise broadcastable to the points.
        :returns: a function ``(M, d) -> (M,)``.
        """
        def f(Xnew):
            mu, var = self.mean_var(Xnew)
            return mu + eps * var.clamp(min=min_var).sqrt()
        return f
