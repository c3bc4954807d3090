r"""The Matern 7/2 kernel (and the smoother half-integer ones, ``nu=``) and the covariances
of its derivatives in closed form, up to second order on each side.

With :math:`\tau = (x - y) / \ell` (per input), :math:`s = |\tau|^2` and
:math:`\rho = \sqrt{7 s}`,

.. math::
    k(x, y) = \sigma^2 f(s), \qquad
    f = \Bigl(1 + \rho + \tfrac{2}{5}\rho^2 + \tfrac{1}{15}\rho^3\Bigr) e^{-\rho} .

A radial function has every partial derivative in closed form from the derivatives of
:math:`f` in :math:`s`:

.. math::
    \partial_\tau^\gamma f(|\tau|^2) = \sum_{\beta \le \gamma / 2}
    \prod_j \frac{\gamma_j!}{\beta_j!\,(\gamma_j - 2\beta_j)!} (2\tau_j)^{\gamma_j - 2\beta_j}
    \; f^{(|\gamma| - |\beta|)}(s),

and with :math:`D = \rho^{-1} d/d\rho` (so :math:`d/ds = \tfrac72 D`),
:math:`f^{(j)} = (7/2)^j q_j`:

.. math::
    q_1 = -\tfrac{1}{15}(3 + 3\rho + \rho^2) e^{-\rho},\quad
    q_2 = \tfrac{1}{15}(1 + \rho) e^{-\rho},\quad
    q_3 = -\tfrac{1}{15} e^{-\rho},\quad
    q_4 = \tfrac{1}{15} \rho^{-1} e^{-\rho} .

:math:`q_4` is singular at 0, but only multiplies :math:`\tau^\gamma` with
:math:`|\gamma| = 4`, which vanishes faster: the kernel is four times differentiable
(its paths twice, the setting of a PDE of second order). The covariance of
:math:`\partial^a f(x)` and :math:`\partial^c f(y)` is
:math:`(-1)^{|c|} \ell^{-(a + c)} \sigma^2 \partial_\tau^{a + c} f`. This is the kernel of
the sparse-Cholesky GP PDE solver (Chen, Owhadi & Schaefer, Math. Comp. 2025): unlike the
SE kernel, conditioned on nearby points it screens out far ones, so its precision has an
accurate sparse Cholesky factor (:mod:`pyro_pidkl.gp.sparse_cholesky`).
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

__all__ = ["Matern72", "matern72_derivative", "matern72_measurement_covariance"]

#: the highest total order of a covariance entry (two derivatives on each side)
MAX_TOTAL_ORDER = 4


def _profile(nu):
    r"""The Matern :math:`\nu = p + 1/2` kernel's :math:`f^{(j)}(s) = \nu^j D^j f` for
    :math:`j \le 4` as ``(polynomial, singular)`` pairs: :math:`e^{-\rho}` times the
    polynomial in :math:`\rho` (exact coefficients, lowest first) plus ``singular``
    :math:`/\rho`, from :math:`D[e^{-\rho} Q] = e^{-\rho} (Q' - Q) / \rho` and
    :math:`f = e^{-\rho} \sum_{i \le p} \frac{p!}{(2p)!} \frac{(p + i)!}{i!\,(p - i)!}
    (2\rho)^{p - i}`."""
    p = int(nu - 0.5)
    if p + 0.5 != nu or p < 3:
        raise ValueError(f"Expected a half-integer smoothness nu >= 7/2 (four derivatives); "
                         f"got {nu}")
    q = [Fraction(0)] * (p + 1)
    for i in range(p + 1):
        q[p - i] = (Fraction(math.factorial(p), math.factorial(2 * p))
                    * Fraction(math.factorial(p + i), math.factorial(i) * math.factorial(p - i))
                    * 2 ** (p - i))
    out = [(q, Fraction(0))]
    for j in range(1, MAX_TOTAL_ORDER + 1):
        r = [(k + 1) * q[k + 1] for k in range(len(q) - 1)] + [Fraction(0)]
        r = [a - b for a, b in zip(r, q)]
        if out[-1][1]:
            raise ValueError(f"Expected at most {j - 1} derivatives of the Matern {nu} "
                             "kernel's profile")
        singular, q = r[0], (r[1:] or [Fraction(0)])
        out.append((q, singular))
    return [([float(c * nu ** j) for c in poly], float(sing * nu ** j))
            for j, (poly, sing) in enumerate(out)]


_PROFILES = {}


def _f(order, rho, nu=3.5):
    r""":math:`f^{(j)}(s)` for ``j <= order`` of the Matern ``nu`` kernel
    (:func:`_profile`; for 7/2 the module docstring's :math:`(7/2)^j q_j`), the exponential
    taken once."""
    if order > MAX_TOTAL_ORDER:
        raise ValueError(f"Expected derivatives of total order at most {MAX_TOTAL_ORDER} "
                         f"(two on each side) for the Matern kernel; got {order}")
    if nu not in _PROFILES:
        _PROFILES[nu] = _profile(nu)
    e = torch.exp(-rho)
    out = []
    for poly, singular in _PROFILES[nu][:order + 1]:
        h = poly[-1] + 0 * rho
        for c in reversed(poly[:-1]):
            h = h * rho + c
        if singular:
            h = h + singular / rho.clamp_min(torch.finfo(rho.dtype).tiny ** 0.5)
        out.append(h * e)
    return out


def matern72_derivative(counts, tau):
    r""":math:`\partial_\tau^\gamma f(|\tau|^2)` of the unit Matern 7/2 kernel in scaled
    units (the module docstring's sum).

    :param counts: ``{input column: order}`` (:math:`\gamma`), total order at most 4.
    :param torch.Tensor tau: ``(..., d)`` scaled differences :math:`(x - y) / \ell`.
    :returns: ``(...)``.
    """
    return _RadialDerivatives(list(tau.unbind(-1)), sum(counts.values()))(counts)


class _RadialDerivatives:
    r"""The quantities every derivative of the kernel at the scaled differences ``tau``
    (a list of ``d`` arrays, one per input) shares, computed once: :math:`f^{(j)}(s)` for
    :math:`j \le` ``order`` and the powers of :math:`2\tau_j`."""

    def __init__(self, tau, order, nu=3.5):
        self.tau = tau
        s = tau[0] * tau[0]
        for t in tau[1:]:
            s = s + t * t
        # s clamped off 0: the same values, and finite gradients at coincident points
        self.f = _f(order, torch.sqrt(2 * nu * s.clamp_min(torch.finfo(s.dtype).tiny)), nu)
        self.powers = {}

    def _power(self, j, k):
        r""":math:`(2\tau_j)^k` by products of the cached lower powers."""
        if (j, k) not in self.powers:
            if k == 1:
                self.powers[j, k] = 2 * self.tau[j]
            else:
                half = self._power(j, k // 2)
                p = half * half
                self.powers[j, k] = p * self._power(j, 1) if k % 2 else p
        return self.powers[j, k]

    def __call__(self, counts):
        counts = {j: n for j, n in counts.items() if n}
        total = sum(counts.values())
        if total >= len(self.f):
            raise ValueError(f"Expected derivatives of total order at most "
                             f"{min(len(self.f) - 1, MAX_TOTAL_ORDER)} here; got {total}")
        # per input: the (beta_j, coefficient, power of 2 tau_j) terms
        stack = [(0, 1.0, ())]
        for j, n in counts.items():
            stack = [(b0 + b, c0 * math.factorial(n) / (math.factorial(b)
                                                        * math.factorial(n - 2 * b)),
                      p0 + (((j, n - 2 * b),) if n - 2 * b else ()))
                     for b0, c0, p0 in stack for b in range(n // 2 + 1)]
        out = None
        for b, c, powers in stack:
            term = self.f[total - b] if c == 1.0 else self.f[total - b] * c
            for j, k in powers:
                term = term * self._power(j, k)
            out = term if out is None else out + term
        return out


def matern72_measurement_covariance(PA, WA, PB, WB, indices, lengthscale, variance=1.0,
                                    nu=3.5):
    r"""Covariances of weighted point measurements of a Matern GP (smoothness ``nu``, a
    half-integer >= 7/2; 7/2 by default), in batches:
    :math:`\operatorname{cov}(\sum_a W^A_{pa} \partial^a f(P^A_p),
    \sum_c W^B_{qc} \partial^c f(P^B_q))`.

    :param PA: ``(..., a, d)`` points; ``WA`` ``(..., a, len(indices))`` weights.
    :param PB: ``(..., b, d)``; ``WB`` ``(..., b, len(indices))``.
    :param indices: derivative indices (tuples of input columns, ``()`` the value), each of
        order at most two.
    :param lengthscale: a scalar or ``(d,)``; ``variance`` a scalar.
    :returns: ``(..., a, b)``.
    """
    d = PA.shape[-1]
    ell = torch.as_tensor(lengthscale, dtype=PA.dtype, device=PA.device).expand(d)
    tau = [PA[..., :, None, j] / ell[j] - PB[..., None, :, j] / ell[j] for j in range(d)]
    indices = [tuple(i) for i in indices]
    keys = {}
    for a in indices:
        for c in indices:
            n = {}
            for j in a + c:
                n[j] = n.get(j, 0) + 1
            keys[a, c] = tuple(sorted(n.items()))
    radial = _RadialDerivatives(tau, max(sum(n for _, n in key) for key in keys.values()), nu)
    blocks = {}
    for key in set(keys.values()):
        scale = 1.0
        for j, nj in key:
            scale = scale * ell[j] ** (-nj)
        blocks[key] = radial(dict(key)) * scale
    # sum_a WA_a (sum_c (-1)^|c| WB_c D_ac): weights one column at a time
    total = None
    for ia, a in enumerate(indices):
        inner = None
        for ic, c in enumerate(indices):
            wb = WB[..., None, :, ic]
            term = blocks[keys[a, c]] * (-wb if len(c) % 2 else wb)
            inner = term if inner is None else inner + term
        term = inner * WA[..., :, ia, None]
        total = term if total is None else total + term
    return variance * total


@dataclass
class Matern72:
    r"""A Matern 7/2 kernel with fixed ``lengthscale`` (a scalar or ``(d,)``, user units)
    and ``variance``; :meth:`measurement_covariance` gives the covariances of weighted
    derivative measurements (:func:`matern72_measurement_covariance`)."""

    lengthscale: object
    variance: float = 1.0

    def measurement_covariance(self, PA, WA, PB, WB, indices):
        return matern72_measurement_covariance(PA, WA, PB, WB, indices, self.lengthscale,
                                               self.variance)

    def __call__(self, X, Y):
        """``k(X, Y)``: ``(n, d)``, ``(m, d)`` -> ``(n, m)``."""
        one = X.new_ones(X.shape[0], 1), Y.new_ones(Y.shape[0], 1)
        return self.measurement_covariance(X, one[0], Y, one[1], [()])
