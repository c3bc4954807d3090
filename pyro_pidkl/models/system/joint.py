r"""The joint Gaussian of a system's data and its linearised equations: what
:class:`~pyro_pidkl.models.ConditionedSystemGP` conditions on.

Each output is :math:`f_c = \mu_c + s_{y,c}(m_c + g_c(u))` with :math:`g_c \sim GP(0, k_c)`,
independent a priori. The system linearised around the jets :math:`f_0` of the outputs at
:math:`Z` (:meth:`SystemJoint.linearise`),

.. math::
    \psi_e[f](z) \approx b_e(z) + \sum_{c,\alpha} w_{e,c,\alpha}(z)\,\partial^\alpha g_c(z),

gives ``E`` virtual observations :math:`v_e = -b_e(Z)` at the ``M`` points, jointly
Gaussian with the data (:meth:`SystemJoint.joint`); the covariances are sums over outputs,

.. math::
    \operatorname{cov}(v_e, v_{e'}) = \sum_c \mathcal{L}_{e,c} \mathcal{L}'_{e',c}\,k_c(Z, Z)
        + \tau\,\operatorname{diag}, \qquad
    \operatorname{cov}(v_e, y_c) = \mathcal{L}_{e,c}\, k_c(Z, X_c), \qquad
    \operatorname{cov}(y_c, y_{c'}) = \delta_{cc'} (k_c(X_c, X_c) + \sigma_c^2 I).

The jets of the posterior means (:meth:`SystemJoint._mean_jet`) are what Gauss-Newton
iterates (:class:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning`).

:class:`SystemJoint` is a mixin of :class:`~pyro_pidkl.models.ConditionedSystemGP`, which
provides the kernels, data by output (``X_s``, ``y_s``, ``counts``), their scales, ``mean``,
``noises()``, ``_count_noise(c)`` (a count output's working-response variance,
:mod:`~pyro_pidkl.models.conditioning.counts`), ``Z``, ``Z_s``, ``indices``, ``num_equations`` and
``residual_noise``.
"""

import math

import torch

from ...gp.joint import JointGaussian
from ...kernels.operators import OperatorCovariance
from ...physics.system import linearise_system

__all__ = ["SystemJoint"]


class SystemJoint:
    """The linearised system's joint with the data by output, and the jets of its posterior
    means (module docstring)."""

    def operators(self, twice_differentiable=False):
        """Per output, its kernel's operator covariances Z-Z and Z-X_c."""
        return [(OperatorCovariance(k, self.Z_s, self.Z_s, twice_differentiable),
                 OperatorCovariance(k, self.Z_s, U, twice_differentiable))
                for k, U in zip(self.kernels, self.X_s)]

    def linearise(self, f0):
        r"""The system at Z linearised around the jets ``f0`` ``(C, len(indices), M)`` (user
        units) and written for the standardised :math:`g_c`: ``(w, b)`` with ``w``
        ``{(e, c): {alpha: (M,)}}`` and ``b`` ``(E, M)``, the constant part (the outputs'
        means included)."""
        lin = linearise_system(self.system, [{i: f0[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               self.Z, self.input_names)
        levels = self.y_loc + self.y_scale * self.mean
        w, b = {}, list(lin.offset)
        for (e, c), coef in lin.coefficients.items():
            w[(e, c)] = {i: v * self.y_scale[c] / torch.prod(self.x_scale[list(i)])
                         for i, v in coef.items()}
            if () in coef:
                b[e] = b[e] + coef[()] * levels[c]
        if self.system_conditions:
            w["conditions"] = self._condition_linearisation(f0)
        return w, torch.stack(b)

    def joint(self, w, b, closed_form=True, operators=None):
        r"""The joint Gaussian of :math:`[v_1; \dots; v_E; y_1; \dots; y_C]` (module
        docstring)."""
        E, C, M = self.num_equations, len(self.outputs), self.Z.shape[0]
        ops = operators or self.operators(twice_differentiable=not closed_form)
        rows = []
        for e1 in range(E):
            row = []
            for e2 in range(E):
                if e2 < e1:
                    row.append(None)
                    continue
                block = 0.0
                for c in range(C):
                    wa, wb = w.get((e1, c)), w.get((e2, c))
                    if wa is not None and wb is not None:
                        block = block + ops[c][0](wa, wb, symmetric=(e1 == e2))
                row.append(block if torch.is_tensor(block) else self.Z.new_zeros(M, M))
            rows.append(row)
        for e1 in range(E):
            for e2 in range(e1):
                rows[e1][e2] = rows[e2][e1].T
        K_vv = torch.cat([torch.cat(r, 1) for r in rows], 0)
        prior_var = K_vv.diagonal()
        K_vv = K_vv + torch.diag(self.residual_noise * prior_var)
        source = self._source_covariance(prior_var)        # unknown sources, if any
        if source is not None:
            K_vv = K_vv + source
        noises = self.noises()
        cross, data = [], []
        for c in range(C):
            n = self.counts[c]
            if not n:
                continue
            col = [ops[c][1](w[(e, c)], {(): 1.0}) if (e, c) in w else self.Z.new_zeros(M, n)
                   for e in range(E)]
            cross.append(torch.cat(col, 0))
            data.append(self._data_covariance(c, noises[c]))
        K_vy = torch.cat(cross, 1) if cross else self.Z.new_zeros(E * M, 0)
        K_yy = torch.block_diag(*data) if data else self.Z.new_zeros(0, 0)
        virtual = [(self._source_values() - b).reshape(-1)]
        if self.system_conditions:           # known values: more virtual rows
            K_cv, K_cc, K_cy, obs_c = self._condition_blocks(w, ops)
            K_vv = torch.cat([torch.cat([K_vv, K_cv.T], 1), torch.cat([K_cv, K_cc], 1)], 0)
            K_vy = torch.cat([K_vy, K_cy], 0)
            virtual.append(obs_c)
        A = torch.cat([torch.cat([K_vv, K_vy], 1), torch.cat([K_vy.T, K_yy], 1)], 0)
        ys, mean = self.y_s, self.mean
        obs = torch.cat(virtual + [ys[c] - mean[c] for c in range(C) if self.counts[c]])
        joint = JointGaussian(A, obs, K_vv.shape[0], closed_form=closed_form)
        joint.w, joint.operators = w, ops
        return joint

    def _data_covariance(self, c, noise):
        r""":math:`k_c(X_c, X_c) + \sigma^2 I` of output ``c``'s data (standardised units;
        ``noise`` :math:`\sigma^2`), plus a count output's working-response variances
        (:mod:`~pyro_pidkl.models.conditioning.counts`) on its diagonal: ``(n_c, n_c)``."""
        U = self.X_s[c]
        K = self.kernels[c](U) + noise * torch.eye(U.shape[0], dtype=U.dtype, device=U.device)
        extra = self._count_noise(c)
        return K if extra is None else K + torch.diag(extra)

    def _offsets(self, joint):
        """Where each output's data sit in the joint's rows: ``{c: slice}``."""
        start, out = joint.M, {}
        for c, n in enumerate(self.counts):
            out[c] = slice(start, start + n)
            start += n
        return out

    def _cross(self, joint, c, U, index=(), operators=None):
        r"""Covariances ``(P, E M + N)`` of :math:`\partial^{index} g_c(U)` with the joint's
        rows."""
        E, M = self.num_equations, self.Z.shape[0]
        UZ, UX = operators or (OperatorCovariance(self.kernels[c], U, self.Z_s),
                               OperatorCovariance(self.kernels[c], U, self.X_s[c]))
        parts = [UZ({index: 1.0}, joint.w[(e, c)]) if (e, c) in joint.w
                 else U.new_zeros(U.shape[0], M) for e in range(E)]
        if self.system_conditions:
            parts += self._condition_cross(joint, c, U, index, UZ)
        for c2, n in enumerate(self.counts):
            if n:
                parts.append(UX({index: 1.0}, {(): 1.0}) if c2 == c
                             else U.new_zeros(U.shape[0], n))
        return torch.cat(parts, 1)

    def _jet_scales(self, c):
        r""":math:`s_{y,c} / \prod_{a \in \alpha} s_{x,a}` for each derivative in
        ``indices`` ``(len(indices),)``: a standardised jet of :math:`g_c` times these is
        the user-unit jet of :math:`f_c` but for its level."""
        return torch.stack([self.y_scale[c] / torch.prod(self.x_scale[list(i)])
                            for i in self.indices])

    def _user_jet(self, c, g):
        r"""The user-unit jet of :math:`f_c` ``(len(indices), M)`` from the standardised
        jet ``g`` of :math:`g_c` (``indices`` start with the value ``()``)."""
        out = g * self._jet_scales(c)[:, None]
        out[0] = out[0] + self.y_loc[c] + self.y_scale[c] * self.mean[c]
        return out

    def _mean_jet(self, joint):
        """The posterior means' jets at Z in user units ``(C, len(indices), M)``."""
        alpha = joint.weights()
        E, M = self.num_equations, self.Z.shape[0]
        where = self._offsets(joint)
        out = []
        for c in range(len(self.outputs)):
            ZZ, ZX = joint.operators[c]
            g = alpha.new_zeros(len(self.indices), M)
            for k, idx in enumerate(self.indices):
                for e in range(E):
                    if (e, c) in joint.w:
                        g[k] += ZZ.matvec({idx: 1.0}, joint.w[(e, c)], alpha[e * M:(e + 1) * M])
                if self.counts[c]:
                    g[k] += ZX.matvec({idx: 1.0}, {(): 1.0}, alpha[where[c]])
                if self.system_conditions:
                    g[k] += self._condition_jet(joint, c, alpha, idx, ZZ)
            out.append(self._user_jet(c, g))
        return torch.stack(out)

    def _data_jet(self):
        """Where Gauss-Newton starts: each observed output's data-only GP mean (its jet at
        Z), an unobserved output's prior mean."""
        out = []
        for c in range(len(self.outputs)):
            g = self.Z.new_zeros(len(self.indices), self.Z.shape[0])
            if self.counts[c]:
                kern, U = self.kernels[c], self.X_s[c]
                K = self._data_covariance(c, self.noises()[c] + 1e-8)
                alpha = torch.cholesky_solve((self.y_s[c] - self.mean[c])[:, None],
                                             torch.linalg.cholesky(K))[:, 0]
                ZX = OperatorCovariance(kern, self.Z_s, U)
                for k, idx in enumerate(self.indices):
                    g[k] = ZX.matvec({idx: 1.0}, {(): 1.0}, alpha)
            out.append(self._user_jet(c, g))
        return torch.stack(out)

    def _residual_size(self, f0):
        lin = linearise_system(self.system, [{i: f0[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               self.Z, self.input_names)
        return float((lin.h0.detach() - self._source_values()).norm())

    def _residual_parts(self, jet, points=None):
        r"""``{equation: (Z, residual, size)}``: each equation's residual
        :math:`\psi_e - g_e` at Z (or at ``points``, user units) and the size of its terms
        (and of a known source), at the posterior means' jets ``jet`` ``(C, len(indices),
        M)`` there (as :func:`~pyro_pidkl.physics.linearise.residual_parts`). Not judged: an
        equation with an unknown source, whose residual is the source."""
        points = self.Z if points is None else points
        lin = linearise_system(self.system, [{i: jet[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               points, self.input_names)
        out = {}
        for e in range(self.num_equations):
            if e in getattr(self, "gp_sources", ()):     # an unknown source is the residual
                continue
            g = self._source_at(e, points)
            size = g.pow(2)
            for (e2, c), coef in lin.coefficients.items():
                if e2 == e:
                    for k, idx in enumerate(self.indices):
                        if idx in coef:
                            size = size + (coef[idx] * jet[c, k]).detach().pow(2)
            name = f"equation {e + 1} of system {self.system.name!r}"
            out[name] = (points, lin.h0[e].detach() - g, size.sqrt())
        return out

    def _mean_jet_at(self, joint, points):
        """The posterior means' jets ``(C, len(indices), P)`` at ``points`` ``(P, d)``
        (user units), off the collocation points."""
        U = (points - self.x_loc) / self.x_scale
        out = []
        for c in range(len(self.outputs)):
            g = torch.stack([joint.mean(self._cross(joint, c, U, idx)) for idx in self.indices])
            out.append(self._user_jet(c, g))
        return torch.stack(out)

    def _between_residual(self, joint):
        """The largest equation's residual between the collocation points
        (:func:`~pyro_pidkl.models.conditioning.resolution.between_residual`)."""
        from ..conditioning.resolution import between_residual
        return between_residual(self, joint)

    def _checked_equations(self):
        """Whether some equation's residual is checked (one with an unknown source is not)."""
        return self.num_equations > len(getattr(self, "gp_sources", ()))

    def _equations_owner(self):
        return self.system

    def _residuals_at(self, jet, points):
        """``[(residual, size)]`` of each checked equation at ``points`` (user units) for the
        jets ``jet`` there (:meth:`_residual_parts`)."""
        return [(r, size) for _, r, size in self._residual_parts(jet, points).values()]

    # -- the collocation rows (conditioning.rows) -----------------------------------------
    #: the tensors with a row per collocation point, and its axis
    collocation_buffers = {"Z": 0, "Z_s": 0, "f0": -1}

    def _jet_at(self, joint, points):
        return self._mean_jet_at(joint, points)

    def _standardise(self, points):
        return (points - self.x_loc) / self.x_scale

    def _restart_lengthscales(self):
        """Each output's lengthscales back where they started (its data-only fit's), the
        linearisation point at the data's (as one equation's,
        :mod:`~pyro_pidkl.models.conditioning.resolution`)."""
        starts = getattr(self, "lengthscale_starts", None)
        if starts is None:
            return
        with torch.no_grad():
            for kern, start in zip(self.kernels, starts):
                kern.lengthscale_unconstrained.copy_(start.log())
            self.f0_set.fill_(False)
        self._cache = None
