r"""A posterior function draw and its derivatives at the collocation points, in closed form.

The physics term needs :math:`f_\epsilon = \mu + \epsilon\sqrt{v}` and its derivatives at
``m`` points :math:`u`. Differentiating the posterior by autograd traces every derivative
order back through the triangular solves with the ``N x N`` Cholesky factor (each solve node
costs an ``N x N`` update in the backward). For the deep kernel
:math:`k(u, x) = s^2 \exp(-\tfrac12 \|P(u) - P(x)\|^2)`, :math:`P = \phi / l`, the
derivatives in :math:`u` have a closed form in the feature map's derivatives
:math:`G_a = \partial_a P`, :math:`G_{ab} = \partial_a \partial_b P` (autograd on the small
``m``-point network only). With :math:`r = P(u) - P(x)`, :math:`e_a = r \cdot G_a`:

.. math::
    \partial_a k = -k\, e_a, \qquad
    \partial_a \partial_b k = k\,\big(e_a e_b - G_a \cdot G_b - r \cdot G_{ab}\big),

    \mu_{(\cdot)} = k_{(\cdot)} \alpha, \quad
    v_a = -2\, k_a C_0, \quad
    v_{ab} = -2\, k_{ab} C_0 - 2\, k_a K^{-1} k_b^\top, \qquad C_0 = K^{-1} k^\top,

    (\sqrt v)_a = \frac{v_a}{2\sqrt v}, \quad
    (\sqrt v)_{ab} = \frac{v_{ab}}{2\sqrt v} - \frac{v_a v_b}{4 v^{3/2}} .

The only products with :math:`K^{-1}` are :math:`C_0` and, per second derivative, the
quadratic form :math:`k_a K^{-1} k_a^\top` (:func:`~pyro_pidkl.gp.posterior.quad_diag`) or, for
a mixed one, :math:`K^{-1}k_b^\top`: each with ``m`` right-hand sides and a closed-form
backward. Orders above two, and kernels other than an SE
kernel on features (``Warping(RBF)`` without output warping), fall back to autograd.
"""

import math

import torch

from ..kernels.deep import se_on_all_features
from ..kernels.feature_jets import feature_jet
from ..kernels.se import se_cross
from ..kernels.taylor_chain import pair_products, rows
from .derivatives import Field

__all__ = ["DrawField", "PosteriorDraw"]


class DrawField(Field):
    r"""The draw :math:`f_\epsilon` at points (user units) with closed-form derivatives up
    to order two (:class:`~pyro_pidkl.physics.derivatives.Field` interface).

    :param posterior: a :class:`~pyro_pidkl.gp.posterior.GPPosterior` on standardised data,
        with a feature map (:func:`~pyro_pidkl.kernels.deep.closed_form_supported`).
    :param torch.Tensor eps: ``(m,)`` (or broadcastable) standard normal noise.
    :param standardizer: the model's :class:`~pyro_pidkl.gp.standardise.Standardizer`.
    :param torch.Tensor points: ``(m, d)`` points, user units.
    :param fallback: a function ``(m, d) -> (m,)`` of the same draw, differentiated by
        autograd for orders above two.
    Other arguments as :class:`~pyro_pidkl.physics.derivatives.Field`.
    """

    def __init__(self, posterior, eps, standardizer, points, names, allowed=None,
                 max_order=math.inf, why="", fallback=None, min_var=1e-12, plan=None):
        st, kernel = standardizer, posterior.kernel
        self._post, self._fallback = posterior, fallback
        self._scale = st.derivative_scale
        self._directions = sorted({names.index(n) for n in (allowed or names)})
        self._plan = {idx for idx in (plan or ()) if 1 <= len(idx) <= 2}
        with torch.enable_grad():
            self._U = st.x_to_model(points.detach())
            ell = self._ell = kernel.kern.lengthscale
            self._net = posterior.feature_map
            self._G, self._rows = None, None
            if self._plan:   # phi(U) and the planned derivatives in one Taylor-mode pass
                self._P = self._jet(set()) / ell                           # (m, F)
            else:
                self._P = self._net(self._U) / ell
            self._PX = posterior.features / ell                            # (N, F)
            s2 = kernel.kern.variance
            self._k = se_cross(self._P, self._PX, s2)                      # (m, N)
            self._C0 = posterior.solve(self._k.T)                          # K^{-1} k^T (N, m)
            mu = self._k @ posterior.alpha + posterior.offset
            v = s2 - (self._k * self._C0.T).sum(-1)
            self._keep = (v > min_var).to(v.dtype)
            self._sqrt_v = v.clamp(min=min_var).sqrt()
            self._eps = eps
            value = st.f_to_user(mu + eps * self._sqrt_v)
        super().__init__(value, points, names, allowed, max_order, why)
        self._autograd_field = None

    # -- the derivatives, all planned ones in one stacked pass ---------------------------
    def _jet(self, extra):
        """One Taylor-mode pass for every derivative of the plan (the equation's last call)
        and ``extra``, after any done before; keeps the feature derivatives stacked,
        :math:`G` ``(n, m, F)`` with the row of each index in ``_rows``, and returns
        :math:`\\phi(U)`."""
        # with a derivative off the plan, the pass is redone with the pairs done before
        pairs = sorted({p for p in self._plan | set(extra) | self._jet_pairs if len(p) == 2})
        phi, T, directions = feature_jet(self._net, self._U, self._directions, pairs,
                                         stacked=True)
        self._G = T / self._ell
        self._rows = {**{(a,): j for j, a in enumerate(directions)},
                      **{p: len(directions) + j for j, p in enumerate(pairs)}}
        return phi

    @property
    def _jet_pairs(self):
        """The second-derivative pairs of the last Taylor-mode pass (a set)."""
        return {i for i in self._rows or () if len(i) == 2}

    def _stacked(self, wanted):
        r"""The derivatives ``wanted`` (index tuples of length 1 or 2) and the first ones
        they need, stacked so that each step of the maths is one op for all of them:
        :math:`e = r \cdot G` ``(n, m, N)``, :math:`\partial k`, :math:`\partial\mu =
        \partial k\,\alpha`, :math:`\partial v`, :math:`\partial\sqrt v`; fills the cache
        with :math:`\partial f_\epsilon` in the user's units."""
        pairs = sorted({i for i in wanted if len(i) == 2})
        firsts = sorted({(a,) for i in wanted for a in i})
        if self._rows is None or any(i not in self._rows for i in firsts + pairs):
            self._jet(set(firsts + pairs))
        n1 = len(firsts)
        ia = [firsts.index((a,)) for a, _ in pairs]
        ib = [firsts.index((b,)) for _, b in pairs]
        k, P, PX, C0T = self._k, self._P, self._PX, self._C0.T
        G = rows(self._G, [self._rows[i] for i in firsts + pairs])            # (n, m, F)
        e = (P * G).sum(-1, keepdim=True) - G @ PX.T                           # (n, m, N)
        # pieces of the (n, m, N) arrays by split, not slices: one backward op for all
        e1, e2 = e.split([n1, len(pairs)]) if pairs else (e, None)
        k1 = -k * e1
        kd = k1
        if pairs:
            ee, GG = pair_products(e1, ia, ib), pair_products(G[:n1], ia, ib)
            kd = torch.cat([k1, k * (ee - GG.sum(-1, keepdim=True) - e2)])
        mu = kd @ self._post.alpha                                             # (n, m)
        v = -2 * (kd * C0T).sum(-1)                                            # (n, m)
        s = self._sqrt_v
        sv = v / (2 * s)
        if pairs:
            sv1, sv2 = sv.split([n1, len(pairs)])
            if ia == ib:   # diag(k_a K^{-1} k_a^T): quadratic forms, no solve backward
                B = rows(k1, ia).reshape(-1, k.shape[-1]).T                    # (N, n2 m)
                q = self._post.quad_diag(B).reshape(len(pairs), -1)
            else:          # k_a K^{-1} k_b^T: one solve for every b
                C1 = self._post.solve(k1.reshape(-1, k.shape[-1]).T)           # (N, n1 m)
                q = (rows(k1, ia) * rows(C1.T.reshape(n1, *k.shape), ib)).sum(-1)
            vv = pair_products(v[:n1], ia, ib)                                 # v_a v_b
            sv = torch.cat([sv1, sv2 - q / s - vv / (4 * s ** 3)])
        d = mu + self._eps * (self._keep * sv)
        idxs = firsts + pairs
        d = self._scale(idxs)[:, None] * d
        for i, di in zip(idxs, d.unbind(0)):
            self._cache.setdefault(i, di)

    # -- the Field interface ----------------------------------------------------------
    def _derivative(self, idx):
        if idx in self._cache:
            return self._cache[idx]
        if len(idx) > 2:
            return self._autograd(idx)
        with torch.enable_grad():
            self._stacked({i for i in self._plan | {idx} if i not in self._cache})
        return self._cache[idx]

    def _autograd(self, idx):
        if self._fallback is None:
            raise ValueError(f"Derivatives of order {len(idx)} need an autograd fallback")
        if self._autograd_field is None:
            with torch.enable_grad():
                pts = self.points.detach().requires_grad_(True)
                self._autograd_field = Field(self._fallback(pts), pts, self.names,
                                             self.allowed, self.max_order, self._why)
        return self._autograd_field._derivative(idx)


class PosteriorDraw:
    r"""The draw :math:`f_\epsilon(x) = m_y + s_y(\mu(u) + \epsilon\sqrt{v(u)})`,
    :math:`u = (x - m_x)/s_x`, of a :class:`~pyro_pidkl.gp.posterior.GPPosterior`: callable
    on user-unit points ``(M, d) -> (M,)`` (differentiable by autograd), and
    :meth:`field` gives its values and derivatives at points in closed form when the kernel
    allows (:func:`~pyro_pidkl.kernels.deep.closed_form_supported`) and ``closed_form`` is set.
    """

    def __init__(self, posterior, eps, standardizer, closed_form=True, min_var=1e-12):
        self.posterior, self.eps, self.standardizer = posterior, eps, standardizer
        self.min_var = min_var
        self.closed_form = (closed_form and posterior.feature_map is not None
                            and se_on_all_features(posterior.kernel.kern))
        self._draw = posterior.draw(eps, min_var)

    def __call__(self, x):
        st = self.standardizer
        return st.f_to_user(self._draw(st.x_to_model(x)))

    def field(self, points, names, allowed=None, max_order=math.inf, why="", plan=None):
        """A :class:`~pyro_pidkl.physics.derivatives.Field` of the draw at ``points``;
        ``plan``: the derivative index tuples to prepare in one pass (others still work)."""
        if self.closed_form:
            return DrawField(self.posterior, self.eps, self.standardizer, points, names,
                             allowed, max_order, why, fallback=self, min_var=self.min_var,
                             plan=plan)
        with torch.enable_grad():
            pts = points.detach().requires_grad_(True)
            return Field(self(pts), pts, names, allowed, max_order, why)
