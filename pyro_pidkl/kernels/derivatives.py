r"""Covariances of derivatives of a GP, for SE kernels on inputs or on features.

If :math:`f \sim GP(0, k)`, derivatives are jointly Gaussian with it, and

.. math::
    \operatorname{cov}\big(\partial^\alpha f(u),\, \partial^\beta f(u')\big)
        = \partial^\alpha_u \partial^\beta_{u'} k(u, u') .

Both kernels of the library are SE kernels on a map :math:`P` of the inputs:
:math:`k(u, u') = s^2 G(r)`, :math:`G(r) = \exp(-\tfrac12 \|r\|^2)`,
:math:`r = P(u) - P(u')`, with :math:`P(u) = \phi(u) / l` for the deep kernel and
:math:`P(u) = u / l` (per input) for the SE-ARD kernel. By Faà di Bruno's formula a
derivative of order :math:`|\alpha| \le 2` in :math:`u` is a sum over the set partitions
:math:`\pi` of :math:`\alpha` of directional derivatives of :math:`G` along
:math:`P_B = \partial^B P(u)`, :math:`B \in \pi` (and along :math:`-P_C(u')` for
:math:`\beta`), and the :math:`n`-th directional derivative of :math:`G` is a Hermite
polynomial in the projections :math:`r \cdot v_i` and inner products :math:`v_i \cdot v_j`:

.. math::
    D^n G[v_1, \dots, v_n] = (-1)^n G(r) \sum_{M} \prod_{\{i, j\} \in M} \big(-v_i \cdot v_j\big)
        \prod_{k \notin M} r \cdot v_k ,

the sum over the partial matchings :math:`M` of :math:`\{1, \dots, n\}`. Every term is an
``(M_A, M_B)`` matrix built from matrix products, so a block costs :math:`O(M_A M_B F)`;
the feature map's derivatives come from one Taylor-mode pass at each point set
(:func:`~pyro_pidkl.physics.posterior_draw.feature_jet`).
"""

import itertools

import torch
from pyro.contrib.gp.kernels import RBF

from .feature_jets import feature_jet
from .deep import feature_map, se_on_all_features
from .hermite import hermite

__all__ = ["DerivativeKernel", "derivative_kernel_supported", "partial_matchings",
           "set_partitions"]


def derivative_kernel_supported(kernel):
    """Whether :class:`DerivativeKernel` handles ``kernel``: an SE kernel on inputs (``RBF``)
    or on all features of a feature map (``Warping(RBF, iwarping_fn=...)``)."""
    if isinstance(kernel, RBF):
        return True
    return feature_map(kernel) is not None and se_on_all_features(kernel.kern)


def set_partitions(items):
    """All set partitions of the tuple ``items`` (a list of lists of tuples)."""
    items = tuple(items)
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = []
    for part in set_partitions(rest):
        out.append([(first,)] + part)
        for i in range(len(part)):
            out.append(part[:i] + [(first,) + part[i]] + part[i + 1:])
    return out


def partial_matchings(n):
    """All partial matchings of ``range(n)``: lists of disjoint index pairs."""
    if n <= 1:
        return [[]]
    out = list(partial_matchings(n - 1))              # n - 1 unmatched
    for i in range(n - 1):
        others = [j for j in range(n - 1) if j != i]
        for m in partial_matchings(n - 2):
            out.append([(i, n - 1)] + [(others[a], others[b]) for a, b in m])
    return out


class _Jet:
    """:math:`P = \\phi / l` and its derivatives :math:`\\partial^B P` at one point set
    (a kernel on features; the SE kernel on inputs takes the 1-D Hermite route)."""

    def __init__(self, kernel, U, indices):
        indices = {tuple(sorted(i)) for i in indices}
        too_high = [i for i in indices if len(i) > 2]
        if too_high:
            raise ValueError(f"Expected derivatives of order at most 2; got order "
                             f"{max(len(i) for i in too_high)}")
        blocks = {tuple(sorted(b)) for i in indices for part in set_partitions(i) for b in part}
        directions = sorted({b[0] for b in blocks if len(b) == 1})
        pairs = sorted(b for b in blocks if len(b) == 2)
        self.d = {}
        ell = kernel.kern.lengthscale
        phi, first, second = feature_jet(feature_map(kernel), U, directions, pairs)
        self.value = phi / ell
        self.d.update({(a,): v / ell for a, v in first.items()})
        self.d.update({p: v / ell for p, v in second.items()})


class DerivativeKernel:
    r"""Cross-covariances :math:`\partial^\alpha_u \partial^\beta_{u'} k(U_A, U_B)` of a GP's
    derivatives between two point sets, for the index tuples asked at construction.

    :param kernel: an SE kernel on inputs (``RBF``) or a deep kernel
        (``Warping(RBF, iwarping_fn=net)``), on standardised inputs.
    :param torch.Tensor UA: ``(M_A, d)`` points.
    :param torch.Tensor UB: ``(M_B, d)`` points.
    :param indices_A: derivative index tuples needed at ``UA`` (``()`` is the value,
        ``(j,)`` :math:`\partial_j`, ``(i, j)`` :math:`\partial_i \partial_j`; column indices).
    :param indices_B: the same at ``UB``.

    ``dk(alpha, beta)`` returns the ``(M_A, M_B)`` matrix.
    """

    def __init__(self, kernel, UA, UB, indices_A=((),), indices_B=((),)):
        if not derivative_kernel_supported(kernel):
            raise TypeError(f"Expected an SE kernel on inputs (RBF) or on features "
                            f"(Warping(RBF)); got {type(kernel).__name__}")
        self.variance = kernel.variance if isinstance(kernel, RBF) else kernel.kern.variance
        if isinstance(kernel, RBF):                 # a product over inputs: 1-D Hermite factors
            self._blocks = {}
            self._se_setup(kernel, UA, UB)
            return
        self._se = None
        self.A = _Jet(kernel, UA, indices_A)
        self.B = _Jet(kernel, UB, indices_B)
        PA, PB = self.A.value, self.B.value
        self._PA_PB = PA @ PB.T
        r2 = (PA * PA).sum(-1, keepdim=True) - 2 * self._PA_PB + (PB * PB).sum(-1)
        self.G = torch.exp(-0.5 * r2.clamp(min=0))                         # (M_A, M_B)
        self._rdot, self._dot, self._blocks = {}, {}, {}

    def _se_setup(self, kernel, UA, UB):
        r"""SE-ARD on inputs: :math:`k = s^2 \prod_j g_j(r_j)`, :math:`g_j(r) =
        e^{-r^2 / 2 l_j^2}`, and :math:`\partial^p_{u_j} \partial^q_{u'_j} g_j =
        (-1)^q g_j^{(p+q)}`, :math:`g^{(n)}(r) = (-1/l)^n He_n(r/l)\, g(r)` (probabilists'
        Hermite polynomials)."""
        active = list(kernel.active_dims)
        ell = kernel.lengthscale.expand(len(active))
        self._se = {"active": active, "ell": dict(zip(active, ell.unbind(0))), "x": {}}
        UA_, UB_ = UA[:, active] / ell, UB[:, active] / ell
        r2 = (UA_ * UA_).sum(-1, keepdim=True) - 2 * UA_ @ UB_.T + (UB_ * UB_).sum(-1)
        self.G = torch.exp(-0.5 * r2.clamp(min=0))
        self._UA, self._UB = UA, UB

    def _se_block(self, alpha, beta):
        se = self._se
        out = self.variance * self.G
        for j in sorted(set(alpha) | set(beta)):
            p, q = alpha.count(j), beta.count(j)
            if j not in se["active"]:
                return torch.zeros_like(self.G)
            ell = se["ell"][j]
            if j not in se["x"]:
                se["x"][j] = (self._UA[:, j, None] - self._UB[None, :, j]) / ell
            x = se["x"][j]
            n = p + q
            if p > 4 or q > 4:
                raise ValueError(f"Expected derivatives of order at most 4 in each argument; "
                                 f"got {p} and {q}")
            he = hermite(n, x) if n > 1 else x
            out = out * (((-1) ** q) * (-1 / ell) ** n) * he
        return out

    def _vec(self, d):
        side, block = d
        return self.A.d[block] if side == "A" else -self.B.d[block]

    def _r_dot(self, d):
        """:math:`r_{ij} \\cdot v` for a direction ``d`` (``(M_A, M_B)``)."""
        if d not in self._rdot:
            v = self._vec(d)
            PA, PB = self.A.value, self.B.value
            if d[0] == "A":
                self._rdot[d] = (PA * v).sum(-1, keepdim=True) - v @ PB.T
            else:
                self._rdot[d] = PA @ v.T - (PB * v).sum(-1)
        return self._rdot[d]

    def _inner(self, d1, d2):
        """:math:`v_1 \\cdot v_2` broadcastable to ``(M_A, M_B)``."""
        key = (d1, d2) if d1 <= d2 else (d2, d1)
        if key not in self._dot:
            a, b = key
            va, vb = self._vec(a), self._vec(b)
            if a[0] == "A" and b[0] == "A":
                self._dot[key] = (va * vb).sum(-1, keepdim=True)
            elif a[0] == "B" and b[0] == "B":
                self._dot[key] = (va * vb).sum(-1)[None, :]
            else:
                self._dot[key] = va @ vb.T if a[0] == "A" else (vb @ va.T)
        return self._dot[key]

    def _hermite(self, directions):
        """:math:`D^n G[v_1..v_n] / G` for directions ``[(side, block), ...]``."""
        n = len(directions)
        total = 0.0
        for match in partial_matchings(n):
            matched = {i for pair in match for i in pair}
            term = 1.0
            for i, j in match:
                term = term * (-self._inner(directions[i], directions[j]))
            for k in range(n):
                if k not in matched:
                    term = term * self._r_dot(directions[k])
            total = total + term
        return total if n % 2 == 0 else -total

    def __call__(self, alpha=(), beta=()):
        alpha, beta = tuple(sorted(alpha)), tuple(sorted(beta))
        if (alpha, beta) not in self._blocks:
            self._blocks[alpha, beta] = self._block(alpha, beta)
        return self._blocks[alpha, beta]

    def _block(self, alpha, beta):
        if self._se is not None:
            return self._se_block(alpha, beta)
        total = 0.0
        for pa, pb in itertools.product(set_partitions(alpha), set_partitions(beta)):
            dirs = ([("A", tuple(sorted(b))) for b in pa]
                    + [("B", tuple(sorted(b))) for b in pb])
            total = total + self._hermite(dirs)
        out = self.variance * self.G * total
        return out.expand(self.G.shape) if out.dim() < 2 or out.shape != self.G.shape else out
