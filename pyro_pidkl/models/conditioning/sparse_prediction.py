r"""The sparse Cholesky solver's solution anywhere: each new point conditioned on the solved
values and derivatives at its nearest points (:class:`SparsePrediction`, a mixin of
:class:`~pyro_pidkl.models.SparseCholeskySolver`).
"""

import warnings

import torch
from scipy.spatial import cKDTree

from ...gp.sparse_cholesky import ENTRIES_PER_BATCH

__all__ = ["OUTSIDE_TOL", "SparsePrediction"]


class SparsePrediction:
    """``solver(Xnew)`` and the values at the collocation points (module docstring)."""

    def posterior_mean(self, Xnew, neighbours=25):
        r"""The solution at ``Xnew`` ``(P, d)`` (``(P,)``), each point conditioned on the
        solution's values and derivatives at its ``neighbours`` nearest points:

        .. math::
            u(x) \approx \operatorname{cov}(u(x), \phi_N)\, \Theta_{NN}^{-1} z_N,

        with :math:`z = \Theta C^\top \lambda` the base measurements of the solution (the
        screening that makes the factors sparse makes far points irrelevant here too; all
        points: the exact posterior mean of the linearised problem). Solves first if
        :meth:`solve` has not run. A point outside the box of the data and collocation
        points by more than :data:`OUTSIDE_TOL` of its width is warned of: there the
        equation was never imposed and the mean is the prior's extrapolation (zero far away)."""
        if self.result is None:
            self.solve()
        Xnew = self._points(Xnew, "Xnew", len(self.names))
        points = torch.cat([self.X, self.Z])
        _warn_outside(Xnew, points, self.names)
        n, w = self.X.shape[0], len(self.indices)
        k = min(int(neighbours), points.shape[0])
        have = torch.zeros(points.shape[0], w, dtype=torch.bool)
        have[:, 0] = True
        have[n:, :] = True
        z = torch.zeros(points.shape[0], w, dtype=torch.float64)
        z[:, 0] = torch.as_tensor(self.values)
        z[n:, 1:] = torch.as_tensor(self.jet[1:]).T
        _, near = cKDTree(points.numpy()).query(Xnew.numpy(), k=k)
        near = torch.as_tensor(near.reshape(Xnew.shape[0], k))
        cov = self._covariance(self.ell)
        eye = torch.eye(w, dtype=torch.float64)
        out = []
        chunk = max(1, ENTRIES_PER_BATCH // (k * w) ** 2)
        with torch.no_grad():
            for s in range(0, Xnew.shape[0], chunk):
                idx = near[s:s + chunk]                                     # (B, k)
                B = idx.shape[0]
                Pm = points[idx].repeat_interleave(w, dim=1)                # (B, k w, d)
                Wm = eye.repeat(k, 1).expand(B, -1, -1)                     # (B, k w, w)
                mask = have[idx].reshape(B, k * w)
                T = cov(Pm, Wm, Pm, Wm)
                T = torch.where(mask[:, :, None] & mask[:, None, :], T, 0.0)
                T = T + torch.diag_embed(torch.where(mask, T.diagonal(dim1=-2, dim2=-1)
                                                     * self.nugget, 1.0))
                kx = cov(Xnew[s:s + chunk, None, :], eye[:1].expand(B, 1, w), Pm, Wm)
                kx = torch.where(mask[:, None, :], kx, 0.0)
                zm = torch.where(mask, z[idx].reshape(B, k * w), 0.0)
                out.append((kx @ torch.linalg.solve(T, zm[..., None]))[:, 0, 0])
        return torch.cat(out)

    @property
    def collocation_values(self):
        """The solution at the collocation points (``(M,)``), from the last step."""
        if self.result is None:
            self.solve()
        return torch.as_tensor(self.jet[0])


#: a prediction further outside the points' box than this fraction of its width is warned of
OUTSIDE_TOL = 0.05


def _warn_outside(Xnew, points, names):
    """One line when rows of ``Xnew`` lie outside the box of ``points`` by more than
    :data:`OUTSIDE_TOL` of its width along some input."""
    lo, hi = points.min(0).values, points.max(0).values
    pad = OUTSIDE_TOL * (hi - lo).clamp_min(1e-300)
    out = ((Xnew < lo - pad) | (Xnew > hi + pad))
    if bool(out.any()):
        which = [n for n, o in zip(names, out.any(0).tolist()) if o]
        box = ", ".join(f"{n} in [{float(a):.3g}, {float(b):.3g}]"
                        for n, a, b in zip(names, lo, hi))
        warnings.warn(f"{int(out.any(1).sum())} of {Xnew.shape[0]} prediction points lie "
                      f"outside the solved region ({box}) along {', '.join(which)}: the equation "
                      f"was never imposed there (the mean is the prior's extrapolation, "
                      f"zero far away)", UserWarning,
                      stacklevel=3)
