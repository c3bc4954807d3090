r"""Known values of a system's outputs, measured or not: conditions on their own points.

A :class:`~pyro_pidkl.physics.Condition` of a system reads its outputs by name, as the
system's ``psi`` does: ``Condition([[0.0]], lambda f, x: f["S"], 0.99)`` (the susceptible
fraction at the start, never measured), ``Condition([[0.0]], lambda f, x: f["x"].d("t"), 0)``
(a velocity), any operator :math:`\mathcal{B}[f_1..f_C](x) = h(x)`. Its points are added to
the collocation points (the system holds there too) and its residual, linearised around
the same jets as the system's,

.. math::
    \mathcal{B}[f](x_k) \approx b(x_k) + \sum_{c,\alpha} w_{c,\alpha}(x_k)\,
        \partial^\alpha g_c(x_k),

is one more virtual observation per point, :math:`h(x_k) - b(x_k)`, jointly Gaussian with
the system's and the data (:class:`SystemConditions`), with a residual variance relative to
its prior variance (the condition's ``residual_noise``, default the model's). A value
condition at the first time is also a known initial state for the shooting stages and the
exact fit (:meth:`SystemConditions.known_states`).
"""

import torch

from ...physics.condition import Condition
from ...physics.derivatives import Inputs
from ...physics.equation import Equation
from ...physics.system import EquationSystem, linearise_system

__all__ = ["SystemConditions"]


class SystemConditions:
    """Conditions of a :class:`~pyro_pidkl.models.ConditionedSystemGP` (module docstring):
    what its joint, its cross-covariances and its mean jets add for them."""

    def _set_conditions(self, conditions, Z):
        """Check ``conditions``, keep them, and return the collocation points ``Z`` with
        their points appended."""
        self.system_conditions = []
        rows = [Z]
        start = Z.shape[0]
        for c in conditions or ():
            if not isinstance(c, Condition) or c.pair is not None:
                raise TypeError(f"Expected conditions to be pyro_pidkl.physics.Condition "
                                f"objects (not periodic); got {c!r}")
            if isinstance(c.operator, Equation):
                raise TypeError(f"Expected the operator of condition {c.name!r} to be "
                                f"psi(f, x) reading outputs by name (f['S']); got an Equation "
                                f"(learned coefficients in a system's condition are not "
                                f"supported)")
            if c.points.shape[1] != Z.shape[1]:
                raise ValueError(f"Expected the points of condition {c.name!r} to have shape "
                                 f"(K, {Z.shape[1]}) for inputs {self.input_names}; got "
                                 f"{tuple(c.points.shape)}")
            K = c.points.shape[0]
            operator = EquationSystem(c.operator, outputs=self.outputs,
                                      inputs=self.system.inputs, name=c.name)
            points = c.points.to(Z)
            values = c.values(Inputs(points, self.input_names)).to(Z)
            self.system_conditions.append((c, operator, start - Z.shape[0], values))
            rows.append(points)
            start += K
        #: the conditions' points are the last rows of Z (kept by collocation subsets)
        self.condition_rows = start - Z.shape[0]
        return torch.cat(rows)

    def _condition_rows(self):
        """``[(condition, operator, rows of Z (K,), values (K,))]``: the conditions' points
        are Z's last ``condition_rows`` rows, in order."""
        first = self.Z.shape[0] - self.condition_rows
        return [(c, op, torch.arange(first + offset, first + offset + v.numel()), v)
                for c, op, offset, v in self.system_conditions]

    def _condition_linearisation(self, f0):
        r"""Each condition linearised around the jets ``f0`` at its points and written for
        the standardised :math:`g_c`: ``[(weights {c: {alpha: (M,)}} zero off its points,
        observations (K,))]``."""
        out = []
        M = self.Z.shape[0]
        levels = self.y_loc + self.y_scale * self.mean
        for cond, operator, idx, values in self._condition_rows():
            jets = [{i: f0[c, k, idx] for k, i in enumerate(self.indices)}
                    for c in range(len(self.outputs))]
            lin = linearise_system(operator, jets, self.Z[idx], self.input_names)
            b = lin.offset[0]
            weights = {}
            for (_, c), coef in lin.coefficients.items():
                unknown = [i for i in coef if i not in self.indices]
                if unknown:
                    raise ValueError(f"Condition {cond.name!r} reads derivative {unknown[0]} of "
                                     f"{self.outputs[c]!r}, which the system does not: "
                                     f"derivatives the system reads are {self.indices}")
                weights[c] = {}
                for i, v in coef.items():
                    full = self.Z.new_zeros(M)
                    full[idx] = (v * self.y_scale[c] / torch.prod(self.x_scale[list(i)])
                                 ).expand(idx.numel())
                    weights[c][i] = full
                if () in coef:
                    b = b + coef[()] * levels[c]
            out.append((weights, values - b))
        return out

    def _condition_blocks(self, w, ops):
        r"""The conditions' rows of the joint: ``(K_cv (Kc, E M), K_cc (Kc, Kc), K_cy
        (Kc, N), obs (Kc,))`` for the equations' weights ``w`` and each condition's
        linearisation ``w["conditions"]``, each condition's residual variance (its
        ``residual_noise`` or the model's, relative to its prior variance) on ``K_cc``'s
        diagonal."""
        E, M = self.num_equations, self.Z.shape[0]
        conds = w["conditions"]
        K_cv, K_cc_rows, K_cy, obs = [], [], [], []
        rows = self._condition_rows()
        for j, ((wj, vj), (cond, _, idx, _)) in enumerate(zip(conds, rows)):
            eq_part = []
            for e in range(E):
                block = 0.0
                for c, wc in wj.items():
                    if (e, c) in w:
                        block = block + ops[c][0](wc, w[(e, c)])[idx]
                eq_part.append(block if torch.is_tensor(block)
                               else self.Z.new_zeros(idx.numel(), M))
            K_cv.append(torch.cat(eq_part, 1) if eq_part else self.Z.new_zeros(idx.numel(), 0))
            row = []
            for j2, ((wj2, _), (_, _, idx2, _)) in enumerate(zip(conds, rows)):
                block = 0.0
                for c, wc in wj.items():
                    if c in wj2:
                        block = block + ops[c][0](wc, wj2[c], symmetric=(j == j2))[idx][:, idx2]
                row.append(block if torch.is_tensor(block)
                           else self.Z.new_zeros(idx.numel(), idx2.numel()))
            K_cc_rows.append(row)
            data = []
            for c, n in enumerate(self.counts):
                if n:
                    data.append(ops[c][1](wj[c], {(): 1.0})[idx] if c in wj
                                else self.Z.new_zeros(idx.numel(), n))
            K_cy.append(torch.cat(data, 1) if data else self.Z.new_zeros(idx.numel(), 0))
            obs.append(vj)
        K_cc = torch.cat([torch.cat(r, 1) for r in K_cc_rows], 0)
        start = 0
        for cond, _, idx, _ in rows:
            stop = start + idx.numel()
            tau = (self.residual_noise if cond.residual_noise is None
                   else torch.as_tensor(cond.residual_noise, dtype=K_cc.dtype))
            prior_var = K_cc.diagonal()[start:stop]
            K_cc = K_cc + torch.diag(torch.nn.functional.pad(
                tau * prior_var, (start, K_cc.shape[0] - stop)))
            start = stop
        return torch.cat(K_cv, 0), K_cc, torch.cat(K_cy, 0), torch.cat(obs)

    def _condition_cross(self, joint, c, U, index, UZ):
        """The covariances ``(P, Kc)`` of :math:`\\partial^{index} g_c(U)` with the
        conditions' rows."""
        parts = []
        for (wj, _), (_, _, idx, _) in zip(joint.w["conditions"], self._condition_rows()):
            parts.append(UZ({index: 1.0}, wj[c])[:, idx] if c in wj
                         else U.new_zeros(U.shape[0], idx.numel()))
        return parts

    def _condition_jet(self, joint, c, alpha, idx_jet, ZZ):
        """What the conditions' rows add to output ``c``'s standardised mean jet at Z for
        derivative ``idx_jet`` ``(M,)``."""
        E, M = self.num_equations, self.Z.shape[0]
        out = self.Z.new_zeros(M)
        start = E * M
        for (wj, _), (_, _, idx, _) in zip(joint.w["conditions"], self._condition_rows()):
            stop = start + idx.numel()
            if c in wj:
                a = self.Z.new_zeros(M)
                a[idx] = alpha[start:stop]
                out = out + ZZ.matvec({idx_jet: 1.0}, wj[c], a)
            start = stop
        return out

    def known_states(self, t0):
        """``{c: value}``: the outputs whose value at ``t0`` a condition states (a value
        condition, ``f["S"]`` at a point at ``t0``): known initial states."""
        out = {}
        with torch.no_grad():
            for cond, operator, idx, values in self._condition_rows():
                for k in range(idx.numel()):
                    if abs(float(self.Z[idx[k], 0]) - float(t0)) > 1e-12:
                        continue
                    jets = [{(): self.Z.new_zeros(1)} for _ in self.outputs]
                    lin = linearise_system(operator, jets, self.Z[idx[k:k + 1]],
                                           self.input_names)
                    coefs = [(c, co) for (_, c), co in lin.coefficients.items()]
                    if (len(coefs) == 1 and set(coefs[0][1]) == {()}
                            and abs(float(coefs[0][1][()][0]) - 1.0) < 1e-12
                            and abs(float(lin.offset[0, 0])) < 1e-12):
                        out[coefs[0][0]] = float(values[k])
        return out
