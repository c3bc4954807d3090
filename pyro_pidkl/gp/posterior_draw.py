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
from ..physics.derivatives import Field

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
        self._x_scale, self._y_scale = st.x_scale, st.y_scale
        self._directions = sorted({names.index(n) for n in (allowed or names)})
        self._plan = {idx for idx in (plan or ()) if 1 <= len(idx) <= 2}
        with torch.enable_grad():
            self._U = st.x_to_model(points.detach())
            ell = self._ell = kernel.kern.lengthscale
            self._net = posterior.feature_map
            self._G, self._jet_pairs = {}, None
            if self._plan:   # phi(U) and the planned derivatives in one Taylor-mode pass
                self._P = self._jet(set()) / ell                           # (m, F)
            else:
                self._P = self._net(self._U) / ell
            self._PX = posterior.features / ell                            # (N, F)
            r2 = ((self._P ** 2).sum(-1, keepdim=True) - 2 * self._P @ self._PX.T
                  + (self._PX ** 2).sum(-1))
            s2 = kernel.kern.variance
            self._k = s2 * torch.exp(-0.5 * r2.clamp(min=0))               # (m, N)
            self._C = {(): posterior.solve(self._k.T)}                     # K^{-1} k^T (N, m)
            mu = self._k @ posterior.alpha + posterior.offset
            v = s2 - (self._k * self._C[()].T).sum(-1)
            self._keep = (v > min_var).to(v.dtype)
            self._sqrt_v = v.clamp(min=min_var).sqrt()
            self._eps = eps
            self._kd, self._ed = {(): self._k}, {}
            self._vd = {(): v}
            value = st.f_to_user(mu + eps * self._sqrt_v)
        super().__init__(value, points, names, allowed, max_order, why)
        self._autograd_field = None

    # -- pieces ---------------------------------------------------------------------
    def _jet(self, extra):
        """One Taylor-mode pass for every derivative of the plan (the equation's last call)
        and ``extra``, after any done before; stores :math:`G` and returns :math:`\\phi(U)`."""
        pairs = {p for p in self._plan | set(extra) if len(p) == 2}
        if self._jet_pairs is not None:
            pairs |= self._jet_pairs              # a derivative off the plan: redo with it
        phi, first, second = feature_jet(self._net, self._U, self._directions, sorted(pairs))
        self._G.update({(a,): v / self._ell for a, v in first.items()})
        self._G.update({p: v / self._ell for p, v in second.items()})
        self._jet_pairs = pairs
        return phi

    def _feature_derivative(self, idx):
        """:math:`G_{idx} = \\partial_{idx} P` ``(m, F)`` for ``idx`` of length 1 or 2."""
        if idx not in self._G:
            self._jet({idx})
        return self._G[idx]

    def _e(self, idx):
        """:math:`r \\cdot G_{idx}` ``(m, N)``."""
        if idx not in self._ed:
            G = self._feature_derivative(idx)
            self._ed[idx] = (self._P * G).sum(-1, keepdim=True) - G @ self._PX.T
        return self._ed[idx]

    def _kernel_derivative(self, idx):
        """:math:`\\partial_{idx} k(u, X)` ``(m, N)``."""
        if idx not in self._kd:
            k = self._k
            if len(idx) == 1:
                self._kd[idx] = -k * self._e(idx)
            else:
                a, b = idx
                Ga, Gb = self._feature_derivative((a,)), self._feature_derivative((b,))
                self._kd[idx] = k * (self._e((a,)) * self._e((b,))
                                     - (Ga * Gb).sum(-1, keepdim=True) - self._e(idx))
        return self._kd[idx]

    def _solved(self, idx):
        """:math:`K^{-1} \\partial_{idx} k(X, u)` ``(N, m)``."""
        if idx not in self._C:
            self._C[idx] = self._post.solve(self._kernel_derivative(idx).T)
        return self._C[idx]

    def _var_derivative(self, idx):
        """:math:`\\partial_{idx} v` ``(m,)`` (the prior variance :math:`s^2` is constant)."""
        if idx not in self._vd:
            q = 2 * (self._kernel_derivative(idx) * self._C[()].T).sum(-1)
            if len(idx) == 2:
                a, b = idx
                if a == b:   # diag(k_a K^{-1} k_a^T): a quadratic form, no solve backward
                    q = q + 2 * self._post.quad_diag(self._kernel_derivative((a,)).T)
                else:
                    q = q + 2 * (self._kernel_derivative((a,)) * self._solved((b,)).T).sum(-1)
            self._vd[idx] = -q
        return self._vd[idx]

    def _sqrt_var_derivative(self, idx):
        s, keep = self._sqrt_v, self._keep
        if len(idx) == 1:
            return keep * self._var_derivative(idx) / (2 * s)
        a, b = idx
        va, vb = self._var_derivative((a,)), self._var_derivative((b,))
        return keep * (self._var_derivative(idx) / (2 * s) - va * vb / (4 * s ** 3))

    # -- the Field interface ----------------------------------------------------------
    def _derivative(self, idx):
        if idx in self._cache:
            return self._cache[idx]
        if len(idx) > 2:
            return self._autograd(idx)
        with torch.enable_grad():
            mu = self._kernel_derivative(idx) @ self._post.alpha
            d = mu + self._eps * self._sqrt_var_derivative(idx)
            scale = self._y_scale / torch.prod(self._x_scale[list(idx)])
            self._cache[idx] = scale * d
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
