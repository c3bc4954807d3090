r"""The sparse Cholesky solver's measurements: the base measurements (every point's value,
each derivative the equation reads at every collocation point), their Matern covariance, the
data and the linearised equation as weights on them (the sparse operator :math:`C`).

:class:`SparseMeasurements` is a mixin of :class:`~pyro_pidkl.models.SparseCholeskySolver`.
"""

import numpy as np
import scipy.sparse
import torch

from ...kernels.matern import matern72_measurement_covariance
from ...physics.linearise import linearise

__all__ = ["SparseMeasurements"]


class SparseMeasurements:
    """The measurements and the linearised operator on them (module docstring)."""

    def _covariance(self, ell, nu=None):
        nu = self.nu if nu is None else nu
        return lambda PA, WA, PB, WB: matern72_measurement_covariance(
            PA, WA, PB, WB, self.indices, ell, nu=nu)

    def _base(self, Z):
        """Base measurements: the value at every point of ``[X; Z]``, then each derivative
        at every point of ``Z``: ``(points, point_of, weights, rows)`` with ``rows[k]`` the
        measurement ids of index ``k`` at ``Z``."""
        n, M, w = self.X.shape[0], Z.shape[0], len(self.indices)
        points = torch.cat([self.X, Z])
        point_of = [np.arange(n + M)]
        W = [np.eye(w)[[0] * (n + M)]]
        rows = {0: n + np.arange(M)}
        for k in range(1, w):
            rows[k] = n + M * k + np.arange(M)
            point_of.append(n + np.arange(M))
            W.append(np.eye(w)[[k] * M])
        return points, np.concatenate(point_of), np.concatenate(W), rows

    def _linearised(self, jet, Z, g, y=None):
        r"""``(weights (n + M, w), rhs (n + M,), residual)`` of the data ``y`` (default all)
        and the equation linearised at ``jet`` ``(w, M)`` at ``Z``; ``residual`` the RMS of
        :math:`\psi[f] - g` there (Gauss-Newton's merit)."""
        y = self.y if y is None else y
        n, w = y.shape[0], len(self.indices)
        lin = linearise(self.equation, {i: jet[k] for k, i in enumerate(self.indices)}, Z,
                        self.names)
        W = torch.zeros(n + Z.shape[0], w, dtype=torch.float64)
        W[:n, 0] = 1
        for k, idx in enumerate(self.indices):
            if idx in lin.coefficients:
                W[n:, k] = lin.coefficients[idx].detach()
        return (W, torch.cat([y, g - lin.offset.detach()]),
                float((lin.h0.detach() - g).pow(2).mean().sqrt()))

    @staticmethod
    def _diagonal(points, point_of, W, cov):
        P = points[torch.as_tensor(point_of)][:, None, :]
        Wt = torch.as_tensor(W, dtype=torch.float64)[:, None, :]
        with torch.no_grad():
            return cov(P, Wt, P, Wt)[:, 0, 0]

    @staticmethod
    def _operator(Wl, rows, n, M, m):
        r""":math:`C`: ``(n + M, m)``: the data rows pick the values at ``X``, the equation's
        rows weigh each base measurement at their point."""
        r = [np.arange(n)]
        c = [np.arange(n)]
        v = [np.ones(n)]
        for k, ids in rows.items():
            r.append(n + np.arange(M))
            c.append(ids)
            v.append(Wl[n:, k])
        return scipy.sparse.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                                       shape=(n + M, m))


def _moved(W, ref):
    """The largest change of a column of weights relative to the column's size."""
    size = ref.abs().amax(0).clamp_min(1e-300)
    return float(((W - ref).abs().amax(0) / size).max())
