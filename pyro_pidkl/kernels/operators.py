r"""Covariances of linear differential operators of a GP, assembled in one pass.

For operators :math:`\mathcal{A} = \sum_a w^A_a(u)\, \partial^a` and
:math:`\mathcal{B} = \sum_c w^B_c(u)\, \partial^c` (point-wise weights, derivatives of
order at most two on each side),

.. math::
    \operatorname{cov}\big(\mathcal{A} f(u_i), \mathcal{B} f(u'_k)\big)
      = \sum_{a, c} w^A_a(u_i)\, w^B_c(u'_k)\, \partial^a_u \partial^c_{u'} k(u_i, u'_k) .

For the SE-ARD kernel :math:`k = s^2 \prod_j g_j`, :math:`g_j = e^{-x_j^2/2}`,
:math:`x_j = (u_j - u'_j)/l_j`, every block is :math:`k` times a product of Hermite
polynomials, :math:`\partial^a_u \partial^c_{u'} k = (-1)^{|a|}\, k \prod_j
l_j^{-n_j} He_{n_j}(x_j)`, :math:`n_j = a_j + c_j` (the number of times :math:`j` occurs in
:math:`a` and :math:`c`). The pairs :math:`(a, c)` with the same :math:`n` share their
polynomial, so the sum is

.. math::
    k \circ \sum_n \Big(\sum_{(a, c) \to n} \pm l^{-n}\, w^A_a {w^B_c}^\top\Big)
        \circ \prod_j He_{n_j}(x_j),

one matrix product for each :math:`n`'s weights and one polynomial per :math:`n`, instead
of a block per pair; a symmetric covariance (:math:`\mathcal{A} = \mathcal{B}` on one point
set) computes the pairs :math:`a \le c` and adds the transpose. Any other kernel that
:class:`~pyro_pidkl.kernels.derivatives.DerivativeKernel` supports (SE on features) goes
block by block through it.
"""

import torch
from pyro.contrib.gp.kernels import RBF

from .derivatives import DerivativeKernel
from .hermite import hermite
from .se import se_cross

__all__ = ["OperatorCovariance", "hermite", "operator_cross"]


def _weights(w, m, like):
    """``{index: (m,) tensor}`` from ``{index: tensor or number}``."""
    return {tuple(sorted(a)): (v.expand(m) if torch.is_tensor(v) and v.dim() == 0 else
                               v if torch.is_tensor(v) else torch.full((m,), float(v),
                                                                      dtype=like.dtype,
                                                                      device=like.device))
            for a, v in w.items()}


class OperatorCovariance:
    r"""Covariances of operators of a GP between two fixed point sets, for any weights:
    ``cov(wA, wB)`` is :func:`operator_cross` at ``UA``, ``UB``. What does not depend on the
    weights (each block :math:`k \circ l^{-n} \prod_j He_{n_j}(x_j)`) is computed once and
    kept, so the operators of successive Gauss-Newton steps (new weights, the same kernel)
    cost one weighting of each kept block, and :meth:`matvec` applies a covariance to a
    vector without forming it.

    :param kernel: as :func:`operator_cross`.
    :param torch.Tensor UA: ``(M_A, d)`` points.
    :param torch.Tensor UB: ``(M_B, d)`` points (``UA`` itself for a symmetric covariance).
    :param bool twice_differentiable: the kernel matrix by plain autograd, differentiable
        twice (default: :func:`~pyro_pidkl.kernels.se.se_cross`, whose backward is written
        out and is not itself differentiable).
    """

    def __init__(self, kernel, UA, UB, twice_differentiable=False):
        self.kernel, self.UA, self.UB = kernel, UA, UB
        self.twice = twice_differentiable
        self.se = isinstance(kernel, RBF)
        self._K, self._x, self._blocks = None, {}, {}
        if self.se:
            active = list(kernel.active_dims)
            self.ell = kernel.lengthscale.expand(len(active))
            self.pos = {j: k for k, j in enumerate(active)}
            self.active = active

    @property
    def K(self):
        """The kernel matrix ``(M_A, M_B)``."""
        if self._K is None:
            a, ell = self.active, self.ell
            P, Q = self.UA[:, a] / ell, self.UB[:, a] / ell
            if self.twice:      # plain autograd: differentiable twice (a Laplace Hessian)
                r2 = ((P * P).sum(-1, keepdim=True) - 2 * P @ Q.T + (Q * Q).sum(-1)).clamp(min=0)
                self._K = self.kernel.variance * torch.exp(-0.5 * r2)
            else:               # the backward written out (se_cross): once
                self._K = se_cross(P, Q, self.kernel.variance)
        return self._K

    def block(self, key):
        r""":math:`k \circ \prod_j l_j^{-n_j} He_{n_j}(x_j)` for ``key`` ``((j, n_j), ...)``
        (kept). Without gradients it is built in place on a copy of the kernel matrix."""
        if key not in self._blocks:
            grad = torch.is_grad_enabled()
            poly, scale = (None if grad else self.K.clone()), 1.0
            for j, nj in key:
                if j not in self._x:
                    diff = self.UA[:, j, None] - self.UB[None, :, j]
                    ell = self.ell[self.pos[j]]
                    self._x[j] = diff / ell if grad else diff.div_(ell)
                h = hermite(nj, self._x[j])
                poly = h if poly is None else (poly * h if grad else poly.mul_(h))
                scale = scale * self.ell[self.pos[j]] ** (-nj)
            if grad:
                self._blocks[key] = self.K if poly is None else self.K * (poly * scale)
            else:
                self._blocks[key] = poly if not key else poly.mul_(scale)
        return self._blocks[key]

    def _groups(self, wA, wB, symmetric):
        order = sorted(wA, key=lambda i: (len(i), i))
        pairs = [(a, c) for i, a in enumerate(order) for c in (order[i:] if symmetric else wB)]
        groups = {}
        for a, c in pairs:
            if any(j not in self.pos for j in a + c):
                continue                          # a derivative in an input k ignores: 0
            n = {}
            for j in a + c:
                n[j] = n.get(j, 0) + 1
            coef = (-1.0) ** len(a) * (0.5 if symmetric and a == c else 1.0)
            groups.setdefault(tuple(sorted(n.items())), []).append((coef, a, c))
        return groups

    def __call__(self, wA, wB, symmetric=False):
        r"""``(M_A, M_B)`` covariances of :math:`\sum_a w^A_a \partial^a f(U_A)` and
        :math:`\sum_c w^B_c \partial^c f(U_B)`; ``symmetric``: ``UA is UB`` and ``wA is
        wB`` (half the pairs, plus the transpose)."""
        wA = _weights(wA, self.UA.shape[0], self.UA)
        wB = wA if symmetric else _weights(wB, self.UB.shape[0], self.UB)
        if not self.se:
            return _by_blocks(self.kernel, self.UA, wA, self.UB, wB)
        if not torch.is_grad_enabled():
            return self._accumulate(wA, wB, symmetric)
        total = None
        for key, terms in self._groups(wA, wB, symmetric).items():
            if len(terms) > 1:
                U = torch.stack([coef * wA[a] for coef, a, _ in terms], 1)
                V = torch.stack([wB[c] for _, _, c in terms], 1)
                term = (U @ V.T) * self.block(key)
            else:
                coef, a, c = terms[0]
                term = (coef * wA[a])[:, None] * self.block(key) * wB[c][None, :]
            total = term if total is None else total + term
        if total is None:
            return torch.zeros_like(self.K)
        return total + total.T if symmetric else total

    def _accumulate(self, wA, wB, symmetric):
        """:meth:`__call__` without gradients: every term added in place to one matrix,
        a weight that is the same at every point (a constant coefficient) as a scalar,
        so that no weighted copy of a block is made (what dominates at ten thousand
        points is memory traffic)."""
        total = torch.zeros_like(self.K)
        constant = {}

        def scalar(w):
            key = id(w)
            if key not in constant:
                constant[key] = float(w[0]) if bool((w == w[0]).all()) else None
            return constant[key]
        for key, terms in self._groups(wA, wB, symmetric).items():
            B = self.block(key)
            for coef, a, c in terms:
                ca, cc = scalar(wA[a]), scalar(wB[c])
                if ca is not None and cc is not None:
                    total.add_(B, alpha=coef * ca * cc)
                elif ca is not None:
                    total.addcmul_(B, wB[c][None, :], value=coef * ca)
                elif cc is not None:
                    total.addcmul_(B, wA[a][:, None], value=coef * cc)
                else:
                    total.addcmul_(B * wA[a][:, None], wB[c][None, :], value=coef)
        return total + total.T if symmetric else total

    def matvec(self, wA, wB, v):
        r""":meth:`__call__` ``(wA, wB)`` times ``v`` ``(M_B,)`` without forming the
        matrix: ``(M_A,)``."""
        wA = _weights(wA, self.UA.shape[0], self.UA)
        wB = _weights(wB, self.UB.shape[0], self.UB)
        if not self.se:
            return _by_blocks(self.kernel, self.UA, wA, self.UB, wB) @ v
        out = torch.zeros(self.UA.shape[0], dtype=v.dtype, device=v.device)
        for key, terms in self._groups(wA, wB, False).items():
            B = self.block(key)
            for coef, a, c in terms:
                out = out + (coef * wA[a]) * (B @ (wB[c] * v))
        return out


def operator_cross(kernel, UA, wA, UB, wB, symmetric=False):
    r"""``(M_A, M_B)`` covariances of :math:`\mathcal{A} f(U_A)` and :math:`\mathcal{B}
    f(U_B)` (module docstring), differentiable in the kernel's parameters, the weights and
    the points.

    :param kernel: an SE kernel on inputs (``RBF``) or one that
        :class:`~pyro_pidkl.kernels.derivatives.DerivativeKernel` supports.
    :param torch.Tensor UA: ``(M_A, d)`` points.
    :param dict wA: ``{index tuple: (M_A,) weights or a number}`` (``()`` the value,
        ``(j,)`` :math:`\partial_j`, ``(i, j)`` :math:`\partial_i\partial_j`; column indices).
    :param torch.Tensor UB: ``(M_B, d)`` points.
    :param dict wB: the same at ``UB``.
    :param bool symmetric: ``UA is UB`` and ``wA is wB``: half the pairs, plus the
        transpose.
    """
    return OperatorCovariance(kernel, UA, UB)(wA, wB, symmetric)


def _by_blocks(kernel, UA, wA, UB, wB):
    dk = DerivativeKernel(kernel, UA, UB, list(wA), list(wB))
    return sum(wA[a][:, None] * wB[c][None, :] * dk(a, c) for a in wA for c in wB)
