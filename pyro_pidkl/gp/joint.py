r"""A joint Gaussian of virtual observations of an operator and of data, factored once.

The physics-conditioned GP observes two things of one function :math:`f \sim GP(0, k)`:
the virtual observations :math:`v = \mathcal{L} f(Z) + \epsilon_r` (an equation's
linearised residual at ``M`` collocation points) and the data :math:`y = f(X) +
\epsilon` (``N`` points). In that order they are jointly Gaussian,

.. math::
    \begin{bmatrix} v \\ y \end{bmatrix} \sim \mathcal{N}\left(0, A\right), \qquad
    A = \begin{bmatrix} A_{vv} & A_{vy} \\ A_{yv} & A_{yy} \end{bmatrix},

and everything the model needs comes from one Cholesky factor of :math:`A`: the joint
density, the density of the virtual observations alone (the factor's top-left block is the
factor of :math:`A_{vv}`), their difference :math:`\log p(y \mid v)`, and the posterior
at new points.

The blocks of :math:`A` live on very different scales (a second derivative's prior
variance is :math:`\sim l^{-4}` times the function's), so :math:`A` is *equilibrated*
before it is factored: :math:`S = D^{-1/2} A D^{-1/2}`, :math:`D = \operatorname{diag}(A)`,
and a jitter, when one is needed, is relative to each row's own variance (an adaptive
nugget, as Chen, Hosseini, Owhadi & Stuart 2021 scale theirs per block). Without it a
nugget that is negligible for the operator rows swamps the data rows, and the solution
of a PDE from boundary data loses three orders of accuracy.

Gradients of the log densities reach :math:`A` and the observations in closed form,

.. math::
    \frac{\partial \log \mathcal{N}(v \mid 0, S)}{\partial S}
        = \tfrac12 (\alpha \alpha^\top - S^{-1}), \qquad
    \frac{\partial \log \mathcal{N}(v \mid 0, S)}{\partial v} = -\alpha, \qquad
    \alpha = S^{-1} v,

instead of autograd through the factorisation; ``closed_form=False`` keeps plain autograd
(any order of derivatives, e.g. a Laplace Hessian).
"""

import math

import torch

from ..errors import NonFiniteError, NotPositiveDefiniteError

__all__ = ["GaussianPieces", "JointGaussian", "equilibrated_cholesky"]


def equilibrated_cholesky(A, jitter=1e-12, max_jitter=1e-4, what="joint covariance",
                          overwrite=False):
    r"""Cholesky factor of :math:`S + jI`, :math:`S = D^{-1/2} A D^{-1/2}`.

    Tries :math:`j = 0`, then ``jitter``, ten times larger each time, up to ``max_jitter``
    (relative to each row's variance, since :math:`S` has a unit diagonal).

    :param torch.Tensor A: ``(n, n)`` symmetric positive semi-definite (not differentiated).
    :param bool overwrite: equilibrate ``A`` in place (it is no longer needed: one matrix
        fewer at ten thousand points).
    :returns: ``(d, L, j)``: ``d`` :math:`= \sqrt{\operatorname{diag} A}` ``(n,)``, ``L``
        ``(n, n)`` lower triangular, ``j`` the jitter used (a float).
    :raises NonFiniteError: ``A`` holds NaN or inf.
    :raises NotPositiveDefiniteError: even ``max_jitter`` does not make it factor.
    """
    A = A.detach()
    diag = A.diagonal()
    if not bool(torch.isfinite(diag).all()) or not bool((diag > 0).all()):
        if not bool(torch.isfinite(A).all()):
            raise NonFiniteError(f"The {what} ({tuple(A.shape)}) contains NaN or inf: the "
                                 "kernel parameters or the linearisation have diverged")
        raise NotPositiveDefiniteError(
            f"The {what} ({tuple(A.shape)}) has a zero or negative variance on its diagonal "
            f"(smallest {float(diag.min()):.3g}): an observation the kernel cannot see")
    d = diag.sqrt()
    S = A.div_(d[:, None]).div_(d[None, :]) if overwrite else A / d[:, None] / d[None, :]
    L, info = torch.linalg.cholesky_ex(S)
    j = 0.0
    if not bool(info) and bool(torch.isfinite(L.diagonal()).all()):
        return d, L, j
    if not bool(torch.isfinite(S).all()):
        raise NonFiniteError(f"The {what} ({tuple(A.shape)}) contains NaN or inf")
    eye = torch.eye(S.shape[0], dtype=S.dtype, device=S.device)
    j = jitter
    while j <= max_jitter * (1 + 1e-12):
        L, info = torch.linalg.cholesky_ex(S + j * eye)
        if not bool(info):
            return d, L, j
        j *= 10.0
    raise NotPositiveDefiniteError(
        f"The {what} ({tuple(A.shape)}) is not positive definite: its Cholesky "
        f"factorisation failed even with a relative jitter of {max_jitter:g} on every row. "
        "Usual causes: a collapsed lengthscale, duplicated points with no noise, or an "
        "equation whose linearisation reads no derivative of f at some collocation points.")


class _Whitened(torch.autograd.Function):
    r"""``[q_v, l_v, q_c, l_c]`` from one factor ``L = chol(S)`` of the joint with ``M``
    virtual rows first: :math:`w = L^{-1} v`, :math:`q_v = |w_{:M}|^2`,
    :math:`q_c = |w_{M:}|^2` (the data given the virtual observations, without the
    cancellation of :math:`q - q_v`), :math:`l_v = 2 \sum_{i<M} \log L_{ii}`,
    :math:`l_c = 2 \sum_{i \ge M} \log L_{ii}`. Backward in closed form: with
    :math:`\alpha = S^{-1} v` and :math:`\alpha_v = S_{vv}^{-1} v_v` (zero-padded), and
    :math:`S_{vv}^{-1}` zero-padded,

    .. math::
        \bar S = -\bar q_c \alpha\alpha^\top + (\bar q_c - \bar q_v) \alpha_v\alpha_v^\top
                 + \bar l_c S^{-1} + (\bar l_v - \bar l_c) S_{vv}^{-1},
        \qquad \bar v = 2 \bar q_c \alpha + 2 (\bar q_v - \bar q_c) \alpha_v .
    """

    @staticmethod
    def forward(ctx, S, v, L, M):
        w = torch.linalg.solve_triangular(L, v[:, None], upper=False)[:, 0]
        logdiag = L.diagonal().log()
        ctx.save_for_backward(L, v)
        ctx.M = M
        return torch.stack([w[:M].pow(2).sum(), 2 * logdiag[:M].sum(),
                            w[M:].pow(2).sum(), 2 * logdiag[M:].sum()])

    @staticmethod
    def backward(ctx, grad):
        L, v = ctx.saved_tensors
        M = ctx.M
        g_qv, g_lv, g_qc, g_lc = grad.unbind(0)
        alpha = torch.cholesky_solve(v[:, None], L)[:, 0]
        alpha_v = torch.zeros_like(alpha)
        if M:
            alpha_v[:M] = torch.cholesky_solve(v[:M, None], L[:M, :M])[:, 0]
        grad_S = grad_v = None
        if ctx.needs_input_grad[0]:
            grad_S = (g_lc * torch.cholesky_inverse(L) - g_qc * torch.outer(alpha, alpha)
                      + (g_qc - g_qv) * torch.outer(alpha_v, alpha_v))
            if M:
                grad_S[:M, :M] += (g_lv - g_lc) * torch.cholesky_inverse(L[:M, :M])
        if ctx.needs_input_grad[1]:
            grad_v = 2 * g_qc * alpha + 2 * (g_qv - g_qc) * alpha_v
        return grad_S, grad_v, None, None


class GaussianPieces:
    r"""The log densities of a joint Gaussian of ``[v; y]`` from its pieces: a subclass's
    ``_pieces()`` returns ``(q_v, l_v, M, q_c, l_c, N)``, the quadratic forms and
    log-determinants of the virtual block and of the data given it; :attr:`penalty` is
    subtracted from the densities of the data (an approximation's bound term)."""

    #: subtracted from :meth:`log_prob` and :meth:`log_prob_data_given_virtual`
    penalty = 0.0

    @staticmethod
    def _gaussian(q, logdet, n):
        return -0.5 * q - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi)

    @staticmethod
    def _profiled(q, logdet, n):
        r""":math:`\max_s \log \mathcal{N}(\cdot \mid 0, s A)`: :math:`-\tfrac n2 \log(q/n)
        - \tfrac12 \log|A| - \tfrac n2 (1 + \log 2\pi)`."""
        return -0.5 * n * torch.log(q / n) - 0.5 * logdet - 0.5 * n * (1 + math.log(2 * math.pi))

    def log_prob(self, profile=False):
        r""":math:`\log p(v, y)`; with ``profile``, maximised over a common scale of ``A``
        (:meth:`scale`)."""
        qv, lv, M, qc, lc, N = self._pieces()
        f = self._profiled if profile else self._gaussian
        return f(qv + qc, lv + lc, M + N) - self.penalty

    def log_prob_virtual(self, profile=False):
        r""":math:`\log p(v)`, the density of the virtual observations alone (from the
        top-left block of the joint factor)."""
        qv, lv, M, *_ = self._pieces()
        if M == 0:
            return qv
        return (self._profiled if profile else self._gaussian)(qv, lv, M)

    def log_prob_data_given_virtual(self, profile=False):
        r""":math:`\log p(y \mid v) = \log p(v, y) - \log p(v)` (from the bottom rows of
        the joint factor); with ``profile``, maximised over a common scale of ``A``."""
        *_, qc, lc, N = self._pieces()
        return (self._profiled if profile else self._gaussian)(qc, lc, N) - self.penalty

    def scale(self, conditional=False):
        r"""The maximum-likelihood common scale :math:`\hat s` of ``A`` (``A`` stands for
        :math:`\hat s A`): :math:`q / n` of the joint, or of :math:`y` given :math:`v` with
        ``conditional`` (not differentiated)."""
        with torch.no_grad():
            qv, _, M, qc, _, N = self._pieces()
            return float(qc / N) if conditional else float((qv + qc) / (M + N))


class JointGaussian(GaussianPieces):
    r"""The joint Gaussian of ``[v; y]`` with covariance ``A`` and observed values ``obs``.

    :param torch.Tensor A: ``(M + N, M + N)`` covariance, virtual rows first
        (differentiable).
    :param torch.Tensor obs: ``(M + N,)`` observed values (differentiable).
    :param int M: the number of virtual observations.
    :param float jitter: first relative jitter tried when the factorisation fails.
    :param float max_jitter: largest relative jitter.
    :param bool closed_form: closed-form gradients (training); ``False``: plain autograd
        through the factorisation (any order, slower).

    Built while gradients are not recorded (Gauss-Newton, predictions), ``A`` is
    equilibrated in place and not kept: the densities then come from the factor alone.
    """

    def __init__(self, A, obs, M, jitter=1e-12, max_jitter=1e-4, closed_form=True):
        n = A.shape[0]
        if A.shape != (n, n) or obs.shape != (n,) or not 0 <= M <= n:
            raise ValueError(f"Expected A (n, n), obs (n,) and 0 <= M <= n; got A "
                             f"{tuple(A.shape)}, obs {tuple(obs.shape)}, M = {M}")
        self.obs, self.M, self.N = obs, M, n - M
        self.closed_form = closed_form
        keep = torch.is_grad_enabled() and A.requires_grad
        self.A = A if keep else None
        self.d, self.L, self.jitter = equilibrated_cholesky(
            A, jitter, max_jitter, what=f"{n} x {n} joint covariance of {M} virtual "
            f"observations and {n - M} data", overwrite=not keep)
        self._alpha = None

    # -- densities ---------------------------------------------------------------------
    def _scaled(self, rows):
        """The equilibrated block ``S[rows, rows] + jI`` (differentiable) and ``obs / d``."""
        d = self.d[rows]
        S = self.A[rows, rows] / d[:, None] / d[None, :]
        if self.jitter:
            S = S + self.jitter * torch.eye(S.shape[0], dtype=S.dtype, device=S.device)
        return S, self.obs[rows] / d

    def _pieces(self):
        """``(q_v, l_v, M, q_c, l_c, N)``: the quadratic forms and log-determinants of the
        virtual block and of the data given it (differentiable; cached per object)."""
        if getattr(self, "_cached_pieces", None) is None:
            M = self.M
            if self.A is None:                    # no gradients: the factor alone
                v = self.obs.detach() / self.d
                w = torch.linalg.solve_triangular(self.L, v[:, None], upper=False)[:, 0]
                logdiag = self.L.diagonal().log()
                qv, lv = w[:M].pow(2).sum(), 2 * logdiag[:M].sum()
                qc, lc = w[M:].pow(2).sum(), 2 * logdiag[M:].sum()
            elif self.closed_form:
                S, v = self._scaled(slice(None))
                qv, lv, qc, lc = _Whitened.apply(S, v, self.L, M)
            else:
                S, v = self._scaled(slice(None))
                L = torch.linalg.cholesky(S)
                w = torch.linalg.solve_triangular(L, v[:, None], upper=False)[:, 0]
                logdiag = L.diagonal().log()
                qv, lv = w[:M].pow(2).sum(), 2 * logdiag[:M].sum()
                qc, lc = w[M:].pow(2).sum(), 2 * logdiag[M:].sum()
            logd = 2 * self.d.log()
            lv, lc = lv + logd[:M].sum(), lc + logd[M:].sum()
            if not all(bool(torch.isfinite(t)) for t in (qv, lv, qc, lc)):
                raise NonFiniteError("The joint (data and equation) log density is NaN/inf")
            self._cached_pieces = (qv, lv, M, qc, lc, self.N)
        return self._cached_pieces

    # -- the posterior -------------------------------------------------------------------
    def weights(self):
        r""":math:`A^{-1}\,\text{obs}` ``(M + N,)`` (not differentiated)."""
        if self._alpha is None:
            with torch.no_grad():
                v = self.obs.detach() / self.d
                self._alpha = torch.cholesky_solve(v[:, None], self.L)[:, 0] / self.d
        return self._alpha

    def mean(self, cross):
        r"""Posterior mean :math:`k_* A^{-1} \text{obs}` for cross-covariances ``cross``
        ``(P, M + N)`` of the new quantities with ``[v; y]``."""
        return cross @ self.weights().to(cross)

    def variance(self, cross, prior, full_cov=False):
        r"""Posterior variance ``(P,)`` (``prior`` the prior variances ``(P,)``) or
        covariance ``(P, P)`` (``prior`` the prior covariance) given ``cross`` ``(P, M + N)``.
        """
        V = torch.linalg.solve_triangular(self.L.to(cross), (cross / self.d.to(cross)).T,
                                          upper=False)
        if full_cov:
            return prior - V.T @ V
        return (prior - V.pow(2).sum(0)).clamp(min=0)
