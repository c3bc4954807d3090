r"""The joint Gaussian of virtual observations and data, with the data's density given the
virtual observations replaced by Titsias's collapsed variational bound: linear in the
number of data.

The dense joint (:class:`~pyro_pidkl.gp.joint.JointGaussian`) factors all :math:`M + N`
rows, :math:`O((M + N)^3)`: at :math:`N = 10^4` data about 5 s and 0.8 GB per factor, and
a fit evaluates it (and its inverse, for the gradients) dozens of times. Here the :math:`M`
virtual observations :math:`v` are kept whole (they are few: the collocation points), and
the data given them,

.. math::
    y \mid v \sim \mathcal{N}(\mu, C + \sigma^2 I), \qquad
    \mu = A_{yv} A_{vv}^{-1} v, \qquad C = K_{yy} - A_{yv} A_{vv}^{-1} A_{vy},

get the variational bound of Titsias (2009) with inducing values :math:`u = f(U)` at
:math:`m` of the data inputs (conditioned on :math:`v` like the data):

.. math::
    \log p(y \mid v) \ge \log \mathcal{N}(y \mid \mu, Q + \sigma^2 I)
        - \frac{\operatorname{tr}(C - Q)}{2 \sigma^2}, \qquad
    Q = C_{yu} C_{uu}^{-1} C_{uy} = \Phi^\top \Phi,

by Woodbury through :math:`B = I + \Phi \Phi^\top / \sigma^2` (:math:`m \times m`):
:math:`O(N m^2 + N m M)`. The bound is tight when :math:`Q` reproduces :math:`C` to well
below the noise, i.e. when the trace term (:attr:`InducingJoint.gap`, a number of nats) is
small: for the smooth (SE) kernels of this library a few hundred inducing points in two
inputs. The posterior is the bound's own, a Gaussian process (the optimal
:math:`q(u) = \mathcal{N}(\tilde m, \tilde S)` in whitened coordinates,
:math:`\tilde S = B^{-1}`, :math:`\tilde m = B^{-1} \Phi (y - \mu) / \sigma^2`): for new
quantities with covariances :math:`k_{*v}, k_{*u}` with :math:`v` and :math:`u`,

.. math::
    \mathbb{E} = k_{*v} A_{vv}^{-1} v + \Psi_*^\top \tilde m, \qquad
    \operatorname{var} = k_{**} - |P_*|^2 - |\Psi_*|^2 + |L_B^{-1} \Psi_*|^2,

with :math:`P_* = L_v^{-1} D_v^{-1} k_{v*}` and :math:`\Psi_* = L_u^{-1} D_u^{-1} (k_{u*} -
P^\top P_*)` (the factors of the equilibrated :math:`A_{vv}` and :math:`C_{uu}`). Everything
is differentiable by autograd, twice (a Laplace Hessian).
"""

import torch

from ..errors import NonFiniteError, NotPositiveDefiniteError
from .joint import GaussianPieces, equilibrated_cholesky

__all__ = ["InducingJoint"]


def _factor(A, what, jitter, max_jitter):
    """``(d, L)``: the equilibrated, jittered Cholesky factor of ``A``, differentiable when
    ``A`` is (the jitter found on the detached matrix)."""
    d, L, j = equilibrated_cholesky(A, jitter, max_jitter, what=what)
    if torch.is_grad_enabled() and A.requires_grad:
        d = A.diagonal().sqrt()
        S = A / d[:, None] / d[None, :]
        if j:
            S = S + j * torch.eye(S.shape[0], dtype=S.dtype, device=S.device)
        L = torch.linalg.cholesky(S)
    return d, L


class InducingJoint(GaussianPieces):
    r"""The joint Gaussian of ``[v; y]`` with :math:`\log p(y \mid v)` replaced by the
    collapsed variational bound on inducing values ``u`` (module docstring).

    :param torch.Tensor A_vv: ``(M, M)`` covariance of the virtual observations.
    :param torch.Tensor A_vy: ``(M, N)`` their covariance with the data.
    :param torch.Tensor A_vu: ``(M, m)`` their covariance with the inducing values.
    :param torch.Tensor K_uu: ``(m, m)`` the inducing values' covariance.
    :param torch.Tensor K_uy: ``(m, N)`` their covariance with the data (noise-free).
    :param torch.Tensor K_yy_diag: ``(N,)`` the data's prior variances without noise.
    :param torch.Tensor noise: :math:`\sigma^2`, the data's noise variance (a scalar).
    :param torch.Tensor obs: ``(M + N,)`` observed values, virtual first.
    :param float jitter: first relative jitter tried when a factorisation fails.
    :param float max_jitter: largest relative jitter.

    The posterior's columns are ``[v; u]``: :meth:`mean` and :meth:`variance` take
    cross-covariances ``(P, M + m)`` with them.
    """

    def __init__(self, A_vv, A_vy, A_vu, K_uu, K_uy, K_yy_diag, noise, obs, jitter=1e-12,
                 max_jitter=1e-4):
        M, N = A_vy.shape
        m = K_uu.shape[0]
        if (A_vv.shape != (M, M) or A_vu.shape != (M, m) or K_uy.shape != (m, N)
                or K_yy_diag.shape != (N,) or obs.shape != (M + N,)):
            raise ValueError(f"Expected A_vv (M, M), A_vy (M, N), A_vu (M, m), K_uu (m, m), "
                             f"K_uy (m, N), K_yy_diag (N,), obs (M + N,); got "
                             f"{tuple(A_vv.shape)}, {tuple(A_vy.shape)}, {tuple(A_vu.shape)}, "
                             f"{tuple(K_uu.shape)}, {tuple(K_uy.shape)}, "
                             f"{tuple(K_yy_diag.shape)}, {tuple(obs.shape)}")
        self.M, self.N, self.obs, self.noise = M, N, obs, noise
        v, y = obs[:M], obs[M:]
        C_uu, C_uy, C_diag = K_uu, K_uy, K_yy_diag
        if M:       # everything given v: A_vv = D_v L_v L_v^T D_v
            self.d_v, self.L_v = _factor(A_vv, f"{M} x {M} covariance of the virtual "
                                         "observations", jitter, max_jitter)
            W = torch.linalg.solve_triangular(self.L_v, A_vy / self.d_v[:, None], upper=False)
            self.P = torch.linalg.solve_triangular(self.L_v, A_vu / self.d_v[:, None],
                                                   upper=False)
            self.u_v = torch.linalg.solve_triangular(self.L_v, (v / self.d_v)[:, None],
                                                     upper=False)[:, 0]
            residual = y - W.T @ self.u_v
            C_uu = K_uu - self.P.T @ self.P
            C_uy = K_uy - self.P.T @ W
            C_diag = K_yy_diag - W.pow(2).sum(0)
        else:
            residual = y
        self.d_u, self.L_u = _factor(C_uu, f"{m} x {m} covariance of the inducing values",
                                     jitter, max_jitter)
        Phi = torch.linalg.solve_triangular(self.L_u, C_uy / self.d_u[:, None], upper=False)
        B = Phi @ Phi.T / noise
        B.diagonal().add_(1.0)
        self.L_B, info = torch.linalg.cholesky_ex(B)
        if bool(info):
            raise NotPositiveDefiniteError(
                f"The inducing-point bound's {m} x {m} matrix I + Phi Phi^T / noise does not "
                f"factor (noise {float(noise):.3g}): a noise this small needs the exact "
                f"likelihood (data_likelihood='exact')")
        g = torch.linalg.solve_triangular(self.L_B, (Phi @ residual)[:, None], upper=False)
        self._g = g[:, 0]
        self._q = (residual.pow(2).sum() - self._g.pow(2).sum() / noise) / noise
        self._logdet = N * torch.log(noise) + 2 * self.L_B.diagonal().log().sum()
        #: the trace term :math:`\operatorname{tr}(C - Q) / (2 \sigma^2)` in nats: the
        #: bound is tight when it is small (a differentiable scalar)
        self.gap = 0.5 * (C_diag - Phi.pow(2).sum(0)).sum() / noise
        self.penalty = self.gap
        self._alpha = None

    # -- densities (GaussianPieces) -------------------------------------------------------
    def _pieces(self):
        """``(q_v, l_v, M, q_c, l_c, N)``: the virtual block's, and the bound's quadratic
        form and log-determinant (differentiable; cached)."""
        if getattr(self, "_cached_pieces", None) is None:
            if self.M:
                qv = self.u_v.pow(2).sum()
                lv = 2 * self.L_v.diagonal().log().sum() + 2 * self.d_v.log().sum()
            else:
                qv = lv = self._q.new_zeros(())
            if not all(bool(torch.isfinite(t)) for t in (qv, lv, self._q, self._logdet,
                                                         self.gap)):
                raise NonFiniteError("The joint (data and equation) log density is NaN/inf")
            self._cached_pieces = (qv, lv, self.M, self._q, self._logdet, self.N)
        return self._cached_pieces

    # -- the posterior: columns [v; u] --------------------------------------------------
    def weights(self):
        r"""``(M + m,)`` weights :math:`\alpha` with :math:`\mathbb{E} = k_* \alpha` for
        cross-covariances :math:`k_*` with ``[v; u]`` (not differentiated):
        :math:`\alpha_u = D_u^{-1} L_u^{-\top} \tilde m`, :math:`\alpha_v = D_v^{-1}
        L_v^{-\top} (L_v^{-1} D_v^{-1} v - P \alpha_u)`."""
        if self._alpha is None:
            with torch.no_grad():
                LB = self.L_B.detach()
                mt = torch.linalg.solve_triangular(LB.T, self._g.detach()[:, None],
                                                   upper=True)[:, 0] / self.noise.detach()
                a_u = torch.linalg.solve_triangular(self.L_u.detach().T, mt[:, None],
                                                    upper=True)[:, 0] / self.d_u.detach()
                if self.M:
                    t = self.u_v.detach() - self.P.detach() @ a_u
                    a_v = torch.linalg.solve_triangular(self.L_v.detach().T, t[:, None],
                                                        upper=True)[:, 0] / self.d_v.detach()
                    self._alpha = torch.cat([a_v, a_u])
                else:
                    self._alpha = a_u
        return self._alpha

    def mean(self, cross):
        r"""Posterior mean for cross-covariances ``cross`` ``(P, M + m)`` with ``[v; u]``."""
        return cross @ self.weights().to(cross)

    def variance(self, cross, prior, full_cov=False):
        r"""Posterior variance ``(P,)`` (``prior`` the prior variances ``(P,)``) or
        covariance ``(P, P)`` (``prior`` the prior covariance) given ``cross``
        ``(P, M + m)`` with ``[v; u]``."""
        with torch.no_grad():
            M = self.M
            cu = cross[:, M:].T                                   # (m, P)
            if M:
                Pv = torch.linalg.solve_triangular(self.L_v.detach().to(cross),
                                                   (cross[:, :M] / self.d_v.detach().to(cross)).T,
                                                   upper=False)
                cu = cu - self.P.detach().to(cross).T @ Pv
            Psi = torch.linalg.solve_triangular(self.L_u.detach().to(cross),
                                                cu / self.d_u.detach().to(cross)[:, None],
                                                upper=False)
            back = torch.linalg.solve_triangular(self.L_B.detach().to(cross), Psi, upper=False)
            if full_cov:
                out = prior - Psi.T @ Psi + back.T @ back
                return out - Pv.T @ Pv if M else out
            reduction = Psi.pow(2).sum(0) - back.pow(2).sum(0)
            if M:
                reduction = reduction + Pv.pow(2).sum(0)
            return (prior - reduction).clamp(min=0)
