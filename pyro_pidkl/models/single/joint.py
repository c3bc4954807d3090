r"""The joint Gaussian of a scalar GP's data and its linearised equation: what
:class:`~pyro_pidkl.models.PhysicsConditionedGP` conditions on and how its objective is
formed.

The equation, and each boundary or initial condition (:class:`~pyro_pidkl.physics.Condition`),
holds at its own rows of the collocation points :math:`Z` (:meth:`EquationJoint._blocks`).
Linearised around the jet :math:`f_0` of a function at :math:`Z`,

.. math::
    \psi[f](z) \approx b(z) + \sum_\alpha J_\alpha(z)\, \partial^\alpha f(z)
        =: b(z) + \mathcal{L} f(z)

(:meth:`EquationJoint.linearise`), the virtual observations
:math:`v = \mathcal{L} f(Z) + \epsilon_r = g(Z) - b(Z)` and the data :math:`y` are jointly
Gaussian (:meth:`EquationJoint.joint`):

.. math::
    \begin{bmatrix} v \\ y \end{bmatrix} \sim
    \mathcal{N}\left(\begin{bmatrix} \mathcal{L} c \\ c \end{bmatrix}, \begin{bmatrix}
      \mathcal{L}_z \mathcal{L}_{z'} k(Z, Z) + \Sigma_g + \tau\, \mathrm{diag} &
      \mathcal{L}_z k(Z, X) \\
      \mathcal{L}_{z'} k(X, Z) & K + \sigma^2 I \end{bmatrix}\right),

with :math:`\tau` relative to the prior variance of :math:`\mathcal{L} f` at each row, and a
periodic condition's rows the differences of its point pairs (:math:`C x`,
:meth:`EquationJoint._rows`). The jets of its posterior mean (:meth:`EquationJoint._mean_jet`)
are what Gauss-Newton iterates
(:class:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning`).

Counts and log-normal data enter as a working response whose variances join the data's
noise on the diagonal (:mod:`~pyro_pidkl.models.conditioning.counts`). On more than
:data:`~pyro_pidkl.models.single.inducing.INDUCING_DATA` data (``data_likelihood="auto"``) the data's density
given :math:`v` is Titsias's collapsed bound on inducing values at the first ``m`` data of
their maximin order (:class:`~pyro_pidkl.gp.inducing.InducingJoint`, :math:`O(N m^2)`
instead of :math:`O((M + N)^3)`), and the posterior that bound's.

:class:`EquationJoint` is a mixin of :class:`~pyro_pidkl.models.PhysicsConditionedGP`,
which provides the data (``X_s``, ``y_s``, ``standardizer``, ``prior_mean()``), the kernel,
``Z``, ``Z_s``, ``indices``, the noises and the source's settings.
"""


import torch
from pyro.nn import PyroModule

from ...gp.inducing import InducingJoint
from ...gp.joint import JointGaussian
from ...gp.posterior import jittered_cholesky
from ...kernels.operators import OperatorCovariance
from ...physics.condition import Condition
from ...physics.derivatives import Inputs
from ...physics.linearise import linearise, residual_parts, unused_coefficients

__all__ = ["EquationJoint"]

class EquationJoint:
    """The rows of the virtual observations, the linearised equation's joint with the data,
    the jets of its posterior mean, and the joint on subsets of its rows (module
    docstring)."""

    def _with_conditions(self, Z, conditions):
        """The collocation points followed by every condition's points."""
        conditions = list(conditions or ())
        for c in conditions:
            if not isinstance(c, Condition):
                raise TypeError(f"Expected conditions to be pyro_pidkl.physics.Condition "
                                f"objects; got {type(c).__name__}")
        # points: the equation's, the conditions', then every periodic condition's first
        # points and last their pairs (whose rows are the differences)
        conditions = ([c for c in conditions if c.pair is None]
                      + [c for c in conditions if c.pair is not None])
        self.conditions = conditions
        self.condition_equations = PyroModule[torch.nn.ModuleList](
            [c.bind(self.input_names, self.equation.inputs) for c in conditions])
        self.periodic_pairs = sum(c.points.shape[0] for c in conditions if c.pair is not None)
        self.condition_rows = sum(c.points.shape[0] for c in conditions) + self.periodic_pairs
        rows = [torch.full((c.points.shape[0],), -1.0 if c.residual_noise is None
                           else float(c.residual_noise), dtype=self.X.dtype)
                for c in conditions]
        # each row's relative residual variance: -1 for the model's residual_noise
        self.register_buffer("row_noise", torch.cat(
            [torch.full((Z.shape[0],), -1.0, dtype=self.X.dtype)] + rows))
        pairs = [c.pair.to(Z) for c in conditions if c.pair is not None]
        return torch.cat([Z] + [c.points.to(Z) for c in conditions] + pairs)

    def _rows(self, x):
        r"""The virtual observations' rows from per-point rows of ``x`` ``(P, ...)``: the
        same, but a periodic pair's is the first point's minus its pair's (:math:`C x`)."""
        K = self.periodic_pairs
        if not K:
            return x
        P = x.shape[0]
        out = x[:P - K].clone()
        out[P - 2 * K:] = out[P - 2 * K:] - x[P - K:]
        return out

    def _points(self, y):
        r""":math:`C^\top y`: per-point values from the rows' ``y`` ``(R, ...)``."""
        K = self.periodic_pairs
        if not K:
            return y
        return torch.cat([y, -y[y.shape[0] - K:]])

    def _blocks(self):
        """``[(start, stop, equation, values), ...]``: the rows of Z the equation holds at
        (first) and each condition's, ``values(Z_rows)`` their right-hand side."""
        M = self.Z.shape[0]
        stop = M - self.condition_rows
        out = [(0, stop, self.equation, self._equation_source)]
        for c, eq in zip(self.conditions, self.condition_equations):
            k = c.points.shape[0]
            out.append((stop, stop + k, eq,
                        lambda Zr, c=c: c.values(Inputs(Zr, self.input_names))))
            stop += k
        for c, eq in zip(self.conditions, self.condition_equations):
            if c.pair is not None:                # the pairs: the same operator, value 0
                k = c.points.shape[0]
                out.append((stop, stop + k, eq, lambda Zr: torch.zeros_like(Zr[:, 0])))
                stop += k
        return out

    def source(self):
        r""":math:`g(Z)` for a known source, else zeros ``(M,)``; at a condition's points its
        values."""
        out = []
        for start, stop, _, value in self._blocks():
            out.append(value(self.Z[start:stop]).to(self.Z))
        return out[0] if len(out) == 1 else torch.cat(out)

    def _equation_source(self, Z):
        if self.source_fn is None:
            return torch.zeros_like(Z[:, 0])
        g = torch.as_tensor(self.source_fn(Inputs(Z, self.input_names)), dtype=Z.dtype)
        if g.dim() == 0:
            g = g.expand(Z.shape[0])
        if g.shape != Z.shape[:1]:
            raise ValueError(f"Expected the source to return shape ({Z.shape[0]},); got "
                             f"{tuple(g.shape)}")
        return g

    def linearise(self, f0):
        r"""The equation at :math:`Z` linearised around the jet ``f0`` (``(len(indices),
        M)``, user units) and written for the standardised GP :math:`f_s`: ``(w, b)`` with
        :math:`\psi[f](Z) \approx b + \sum_\alpha w_\alpha \partial^\alpha_u f_s(Z)`
        (``w`` ``{alpha: (M,)}``, ``b`` ``(M,)``)."""
        scale = self.standardizer.derivative_scale(self.indices)
        parts, bs = [], []
        for start, stop, eq, _ in self._blocks():
            jet = {idx: f0[k, start:stop] for k, idx in enumerate(self.indices)}
            lin = linearise(eq, jet, self.Z[start:stop], self.input_names)
            w = {idx: lin.coefficients[idx] * scale[k] for k, idx in enumerate(self.indices)
                 if idx in lin.coefficients}
            b = lin.offset
            if () in lin.coefficients:
                b = b + lin.coefficients[()] * self.standardizer.y_loc
            parts.append((stop - start, w))
            bs.append(b.expand(stop - start) if b.dim() == 0 else b)
        if len(parts) == 1:
            return parts[0][1], bs[0]
        used = {idx for _, w in parts for idx in w}
        like = self.Z[:, 0]
        w = {}
        for idx in used:
            pieces = []
            for size, wk in parts:
                v = wk.get(idx)
                if v is None:
                    v = like.new_zeros(size)
                elif not torch.is_tensor(v) or v.dim() == 0:
                    v = torch.as_tensor(v, dtype=like.dtype).expand(size)
                pieces.append(v)
            w[idx] = torch.cat(pieces)
        return w, torch.cat(bs)

    def operators(self, twice_differentiable=False):
        """The kernel's operator covariances between Z and Z and between Z and X
        (:class:`~pyro_pidkl.kernels.operators.OperatorCovariance`): what Gauss-Newton steps
        at fixed parameters share."""
        return (OperatorCovariance(self.kernel, self.Z_s, self.Z_s, twice_differentiable),
                OperatorCovariance(self.kernel, self.Z_s, self.X_s, twice_differentiable))

    def joint(self, w, b, closed_form=True, operators=None):
        r"""The joint Gaussian of :math:`[v; y]` for the linearisation ``(w, b)``: a
        :class:`~pyro_pidkl.gp.joint.JointGaussian`, or on many data an
        :class:`~pyro_pidkl.gp.inducing.InducingJoint` (:meth:`_inducing_inputs`), with the
        pieces predictions need attached (``w`` the operator's weights, ``c`` the prior
        mean, ``operators`` with Z and with ``inputs``, the standardised inputs of the
        posterior's columns after the virtual ones: the data, or the inducing points)."""
        N, M = self.X_s.shape[0], self.Z_s.shape[0] - self.periodic_pairs
        ZZ, ZX = operators or self.operators(twice_differentiable=not closed_form)
        # L_z L_z' k(Z, Z) and L_z k(Z, X): the linearised operator's covariances (a
        # periodic pair's row: the difference of its two points')
        K_LL = ZZ(w, w, symmetric=True)
        K_Lx = ZX(w, {(): 1.0})
        if self.periodic_pairs:
            K_LL = self._rows(self._rows(K_LL).T).T
            K_Lx = self._rows(K_Lx)
        prior_var = K_LL.diagonal()
        residual = torch.where(self.row_noise < 0, self.residual_noise,
                               self.row_noise) * prior_var
        source = None
        if self.source_kind == "gp":             # on the equation's rows, not the conditions'
            E = self.Z_s.shape[0] - self.condition_rows
            source = prior_var[:E].mean() * self.source_kernel(self.Z_s[:E] * self.source_mask)
            if self.condition_rows:
                source = torch.nn.functional.pad(source, (0, M - E, 0, M - E))
        # the noise variance is relative to the signal variance (both scale with the profile)
        noise = self.noise * self._signal_variance()
        c = self.prior_mean()
        mean_L = w[()] * c if () in w else torch.zeros_like(b)
        obs = torch.cat([self._rows(self.source() - b - mean_L), self.y_s - c])
        inducing = self._inducing_inputs()
        if inducing is not None:                 # Titsias's bound on the data given v
            ZU = OperatorCovariance(self.kernel, self.Z_s, inducing, not closed_form)
            K_vu = ZU(w, {(): 1.0})
            if self.periodic_pairs:
                K_vu = self._rows(K_vu)
            K_vv = K_LL + torch.diag(residual) + (0.0 if source is None else source)
            joint = InducingJoint(K_vv, K_Lx, K_vu, self.kernel(inducing),
                                  self.kernel(inducing, self.X_s),
                                  self.kernel(self.X_s, diag=True), noise, obs)
            ZX = ZU
        elif torch.is_grad_enabled():
            K_vv = K_LL + torch.diag(residual) + (0.0 if source is None else source)
            K_yy = self.kernel(self.X_s) + noise * torch.eye(N, dtype=K_LL.dtype,
                                                             device=K_LL.device)
            if self.count_outputs:               # the working response's own variances
                K_yy = K_yy + torch.diag(self._count_noise(0))
            A = torch.cat([torch.cat([K_vv, K_Lx], 1), torch.cat([K_Lx.T, K_yy], 1)], 0)
            joint = JointGaussian(A, obs, M, closed_form=closed_form)
        else:                                     # in place: one (N + M)^2 matrix
            A = K_LL.new_empty(M + N, M + N)
            A[:M, :M] = K_LL
            del K_LL
            A[:M, :M].diagonal().add_(residual)
            if source is not None:
                A[:M, :M] += source
            A[:M, M:] = K_Lx
            A[M:, :M] = K_Lx.T
            A[M:, M:] = self.kernel(self.X_s)
            A[M:, M:].diagonal().add_(noise)
            if self.count_outputs:
                A[M:, M:].diagonal().add_(self._count_noise(0))
            joint = JointGaussian(A, obs, M, closed_form=closed_form)
        joint.w, joint.c, joint.operators = w, c, (ZZ, ZX)
        joint.inputs = self.X_s if inducing is None else inducing
        return joint

    def _cross(self, joint, U, index=(), operators=None):
        r"""Covariances ``(P, M + N)`` of :math:`\partial^{index} f_s(U)` with ``[v; y]``, or
        ``(P, M + m)`` with ``[v; u]`` when ``joint`` is Titsias's bound on inducing values
        at ``joint.inputs`` (``operators``: those between ``U`` and Z and ``joint.inputs``,
        when kept)."""
        UZ, UX = operators or (OperatorCovariance(self.kernel, U, self.Z_s),
                               OperatorCovariance(self.kernel, U, joint.inputs))
        UZw = UZ({index: 1.0}, joint.w)
        if self.periodic_pairs:
            UZw = self._rows(UZw.T).T
        return torch.cat([UZw, UX({index: 1.0}, {(): 1.0})], 1)

    def _mean_jet(self, joint, U=None, indices=None):
        """The posterior mean's jet at ``U`` (standardised; default Z) in user units
        ``(len(indices), P)`` (``indices``: default the model's)."""
        indices = self.indices if indices is None else list(indices)
        UZ, UX = (joint.operators if U is None else
                  (OperatorCovariance(self.kernel, U, self.Z_s),
                   OperatorCovariance(self.kernel, U, joint.inputs)))
        alpha = joint.weights()
        M = joint.M
        a_points = self._points(alpha[:M])
        scale = self.standardizer.derivative_scale(indices)
        rows = []
        for k, idx in enumerate(indices):
            mean = (UZ.matvec({idx: 1.0}, joint.w, a_points)
                    + UX.matvec({idx: 1.0}, {(): 1.0}, alpha[M:]))
            v = (mean + (joint.c if idx == () else 0.0)) * scale[k]
            rows.append(v + self.standardizer.y_loc if idx == () else v)
        return torch.stack(rows)

    def _data_jet(self):
        """The jet at Z of the data-only GP's posterior mean (user units): where Gauss-Newton
        starts. Zero is a poor start: it solves many equations (``f' = r f (1 - f)``,
        ``u_t = u_xx + u^3``), and a linearisation there can keep the iterates on that
        trivial solution whatever the data say."""
        N = self.X_s.shape[0]
        noise = self.noise * self._signal_variance()
        c = self.prior_mean()
        U = self._inducing_inputs()
        if U is None:
            K = self.kernel(self.X_s) + noise * torch.eye(N, dtype=self.X_s.dtype,
                                                          device=self.X_s.device)
            if self.count_outputs:
                K = K + torch.diag(self._count_noise(0))
            alpha = torch.cholesky_solve((self.y_s - c)[:, None],
                                         jittered_cholesky(K, 1e-10, 1e-2))[:, 0]
            ZX = OperatorCovariance(self.kernel, self.Z_s, self.X_s)
        else:                      # many data: the same bound's posterior, no equation
            empty = self.X_s.new_zeros(0, U.shape[0])
            alpha = InducingJoint(empty[:, :0], self.X_s.new_zeros(0, N), empty,
                                  self.kernel(U), self.kernel(U, self.X_s),
                                  self.kernel(self.X_s, diag=True), noise,
                                  self.y_s - c).weights()
            ZX = OperatorCovariance(self.kernel, self.Z_s, U)
        scale = self.standardizer.derivative_scale(self.indices)
        rows = []
        for k, idx in enumerate(self.indices):
            v = (ZX.matvec({idx: 1.0}, {(): 1.0}, alpha) + (c if idx == () else 0.0)) * scale[k]
            rows.append(v + self.standardizer.y_loc if idx == () else v)
        return torch.stack(rows)

    def _residual_size(self, f0):
        r""":math:`\|\psi[f](Z) - g(Z)\|` for the jet ``f0`` of :math:`f` at :math:`Z`: the
        merit of a damped Gauss-Newton step."""
        parts = []
        for start, stop, eq, value in self._blocks():
            jet = {idx: f0[k, start:stop] for k, idx in enumerate(self.indices)}
            h = linearise(eq, jet, self.Z[start:stop], self.input_names).h0
            parts.append(h.detach() - value(self.Z[start:stop]))
        return float(self._rows(torch.cat(parts)).norm())

    def _residual_parts(self, jet):
        r"""``{block: (points, residual, size)}``: :math:`\psi[\mu](Z) - g(Z)` and the size
        of the terms :math:`J_\alpha \partial^\alpha \mu` (and :math:`g`) at each point,
        for the equation and each condition, from the posterior mean's jet ``jet`` at Z (user
        units; :func:`~pyro_pidkl.physics.linearise.residual_parts`). Not judged: the
        equation with an unknown (``"gp"``) source, whose residual *is* the source's
        posterior mean, and a periodic condition, whose rows are differences."""
        out = {}
        blocks = self._blocks()[:1 + len(self.conditions)]
        names = [f"equation {self.equation.name!r}"] + [f"condition {c.name!r}"
                                                        for c in self.conditions]
        for (start, stop, eq, value), name, c in zip(blocks, names, [None, *self.conditions]):
            if (c is not None and c.pair is not None) or (c is None and self.source_kind == "gp"):
                continue     # a periodic pair's rows are differences; an unknown source is
                             # the residual itself
            part = {idx: jet[k, start:stop] for k, idx in enumerate(self.indices)}
            Zb = self.Z[start:stop]
            r, size = residual_parts(eq, part, Zb, self.input_names, value(Zb))
            if c is not None:
                # a condition's terms can be its residual alone (f_x = 0 at an end: r / size
                # is 1 however small r is): measured against its operator's size inside
                # the domain too, at the equation's points
                E = self._equation_rows()
                inner = {idx: jet[k, :E] for k, idx in enumerate(self.indices)}
                _, inside = residual_parts(eq, inner, self.Z[:E], self.input_names)
                size = torch.maximum(size, inside.pow(2).mean().sqrt().expand_as(size))
            out[name] = (Zb, r, size)
        return out

    def _warn_unused_coefficients(self, seed):
        """One line naming each learned coefficient the residual never depends on (at
        random jets): the fit cannot move it."""
        coefficients = [(n, getattr(owner, p + "_unconstrained"))
                        for n, owner, p in self._coefficients()]
        if not coefficients:
            return
        blocks = self._blocks()

        def residual(g):
            parts = []
            for start, stop, eq, _ in blocks:
                probe = self.Z[start:stop][:: max(1, (stop - start) // 16)][:16]
                jet = {i: torch.randn(probe.shape[0], generator=g, dtype=probe.dtype)
                       for i in self.indices}
                parts.append(linearise(eq, jet, probe, self.input_names).h0)
            return torch.cat(parts)
        self._warn_unused(unused_coefficients(residual, coefficients, seed=seed))

    # -- subsets: the joint on fewer rows (infer.fit's screen and its large problems) ------
