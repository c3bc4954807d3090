r"""A sparse Cholesky factor of the precision of point measurements by Kullback-Leibler
minimisation (Schaefer, Katzfuss & Owhadi, SIAM J. Sci. Comput. 2021; for derivative
measurements Chen, Owhadi & Schaefer, Math. Comp. 2025).

The measurements :math:`\phi_i = \sum_a W_{ia} \partial^a f(p_{k(i)})` sit at points
:math:`p`. The points are put in maximin order (each next point the farthest from those
before it; :math:`\ell_k` its distance to them), and the measurements of a point follow it
in the order given. Measurement :math:`i` is conditioned on the earlier measurements within
:math:`\rho \ell_{k(i)}` of its point (the Vecchia approximation, KL-optimal for that
sparsity):

.. math::
    \Theta^{-1} \approx U U^\top, \qquad
    U_{s_i, i} = \frac{\Theta_{s_i s_i}^{-1} e_i}{\sqrt{e_i^\top \Theta_{s_i s_i}^{-1} e_i}},

with :math:`s_i` the conditioning set and :math:`i`; exact when every :math:`s_i` holds all
earlier measurements. All measurements of one point share one factorisation (a
supernode): for :math:`\Theta_{ss} = L L^\top` with the point's measurements last, their
columns are the last columns of :math:`L^{-\top}`. :math:`U` is upper triangular in the
ordering; :math:`\Theta x \approx U^{-\top} U^{-1} x` is two sparse triangular solves.

The factor is as good as the kernel's screening (conditioned on nearby points, far ones
carry little information): the Matern kernels screen and the error falls exponentially in
:math:`\rho`; the SE kernel screens weakly (``benchmarks/sparse_cholesky_se.py``).
"""

import heapq

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
import torch
from scipy.spatial import cKDTree

from ..errors import NotPositiveDefiniteError

__all__ = ["DENSE_LIMIT", "SparseInverseCholesky", "conditioning_sets", "maximin_order", "supernodes"]

#: covariance entries per batched call: small enough that its arrays stay in cache
ENTRIES_PER_BATCH = 262_144

#: the sparse solver's factors hold at most this many measurements exactly (dense): up to
#: about 1.2 GB a matrix and, on three-input problems of this size, no slower than the
#: sparse factor with its CG iterations; free of the error the sparse factor's triangular
#: solves amplify on ill-conditioned covariances
DENSE_LIMIT = 12_000


def maximin_order(points):
    r"""The maximin (farthest-point) order of ``points`` ``(n, d)`` and each point's distance
    :math:`\ell` to the points before it (``inf`` for the first), in :math:`O(n \log n)`
    tree queries: a point's distance only falls when a new point lands within it.

    :returns: ``(order, lengths)``: ``(n,)`` int64 indices, ``(n,)`` float64 distances, the
        distances non-increasing.
    """
    x = np.asarray(points, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    tree = cKDTree(x)
    nearest = np.full(n, np.inf)
    done = np.zeros(n, dtype=bool)
    order, lengths = np.empty(n, dtype=np.int64), np.empty(n)
    # start from the point nearest the centroid, then a lazy max-heap of distances
    first = int(((x - x.mean(0)) ** 2).sum(1).argmin())
    heap = [(-np.inf, first)]
    step = 0
    while step < n:
        if heap:
            key, i = heapq.heappop(heap)
            if done[i] or -key != nearest[i]:
                continue
        else:                                    # only at the start: every distance inf
            i = int(np.flatnonzero(~done)[0])
        done[i] = True
        order[step], lengths[step] = i, nearest[i]
        step += 1
        radius = nearest[i]
        near = (np.flatnonzero(~done) if not np.isfinite(radius)
                else np.asarray(tree.query_ball_point(x[i], r=radius), dtype=np.int64))
        if near.size == 0:
            continue
        near = near[~done[near]]
        d = np.sqrt(((x[near] - x[i]) ** 2).sum(1))
        closer = d < nearest[near]
        for j, dj in zip(near[closer].tolist(), d[closer].tolist()):
            nearest[j] = dj
            heapq.heappush(heap, (-dj, j))
    return order, lengths


def conditioning_sets(points, order, lengths, rho):
    r"""For each position :math:`k` of the maximin ``order``, the earlier positions whose
    points lie within :math:`\rho \ell_k` of it (the first point's radius is infinite: it
    has none before it).

    :returns: a list of ``n`` int64 arrays of positions, each sorted.
    """
    x = np.asarray(points, dtype=np.float64)[order]
    n = x.shape[0]
    radius = rho * np.where(np.isfinite(lengths), lengths, np.inf)
    tree = cKDTree(x)
    finite = np.isfinite(radius)
    out = [None] * n
    hits = tree.query_ball_point(x[finite], r=radius[finite]) if finite.any() else []
    for k, h in zip(np.flatnonzero(finite).tolist(), hits):
        h = np.asarray(h, dtype=np.int64)
        out[k] = np.sort(h[h < k])
    for k in np.flatnonzero(~finite).tolist():
        out[k] = np.arange(k, dtype=np.int64)
    return out


def supernodes(points, lengths, sets, rho, lam=1.5, alpha=1.0):
    r"""Aggregate the positions of a maximin order into supernodes: columns that share
    one conditioning set and one factorisation (Schaefer, Katzfuss & Owhadi 2021, sec. 3.2).

    The positions are cut into levels whose lengths lie within a factor ``lam`` of the
    level's largest; a level's points go to their nearest centre among the maximin prefix
    whose lengths are at least :math:`\alpha \rho \ell_{\min}` (a net of that spacing),
    and the points of one level with one centre form a supernode. Its set is the union of
    its members' conditioning sets and the members themselves: each member is then
    conditioned on every earlier position of the union, a superset of its own set (at least
    as accurate), and the supernode costs one Cholesky factorisation instead of one per
    member.

    :param points: ``(n, d)`` the points in maximin order (the factor's metric).
    :param lengths: ``(n,)`` their maximin lengths (non-increasing, ``inf`` first).
    :param sets: :func:`conditioning_sets` of the order.
    :param float lam: the levels' ratio (> 1); ``None``: one supernode per point.
    :param float alpha: the centres' spacing in units of :math:`\rho \ell_{\min}`.
    :returns: a list of ``(members, union)``: sorted int64 positions.
    """
    n = lengths.shape[0]
    if lam is None:
        return [(np.array([k]), np.append(sets[k], k)) for k in range(n)]
    if not lam > 1:
        raise ValueError(f"Expected the supernodes' level ratio lam > 1; got {lam}")
    x = np.asarray(points, dtype=np.float64)
    decreasing = -lengths                       # non-decreasing, for searchsorted
    out, pos = [], 0
    while pos < n:
        if not np.isfinite(lengths[pos]):
            out.append((np.array([pos]), np.append(sets[pos], pos)))
            pos += 1
            continue
        end = max(pos + 1, int(np.searchsorted(decreasing, -lengths[pos] / lam, "left")))
        low = lengths[end - 1]
        centres = max(1, int(np.searchsorted(decreasing, -alpha * rho * low, "right")))
        _, near = cKDTree(x[:centres]).query(x[pos:end])
        near = np.atleast_1d(near)
        by = np.argsort(near, kind="stable")
        cuts = np.flatnonzero(np.diff(near[by])) + 1
        for group in np.split(by + pos, cuts):
            members = np.sort(group)
            union = np.unique(np.concatenate([sets[k] for k in members] + [members]))
            out.append((members, union))
        pos = end
    return out


class SparseInverseCholesky:
    r"""The KL-optimal sparse factor :math:`U` of :math:`\Theta^{-1}` for measurements at
    points (module docstring), ``U`` upper triangular in the order ``perm``.

    :param points: ``(n, d)`` distinct points.
    :param point_of: ``(m,)`` the point of each measurement.
    :param weights: ``(m, w)`` each measurement's weights on the covariance's derivative
        indices.
    :param covariance: ``covariance(PA, WA, PB, WB)`` -> ``(..., a, b)``, the covariances of
        weighted measurements at batches of points (e.g. a
        :func:`~pyro_pidkl.kernels.matern.matern72_measurement_covariance` with its indices
        and lengthscale bound).
    :param nugget: ``(m,)`` or a scalar added to each measurement's variance (noise).
    :param float rho: the conditioning radius in units of :math:`\ell` (larger: more
        accurate, denser).
    :param order: ``(order, lengths)`` of the points if already known (:func:`maximin_order`
        of ``points / scale``).
    :param scale: ``(d,)`` or a scalar: distances (the ordering and the radii) are measured
        in ``points / scale``, the metric in which the kernel is isotropic (its lengthscales).
    :param float lam: :func:`supernodes`' level ratio (``None``: a supernode per point, the
        measurements of one point sharing it).
    :param float alpha: :func:`supernodes`' centre spacing.
    :param int dense_limit: with at most this many measurements, the factor is the exact
        (dense) one instead (``0``: always sparse); ``None`` (default): exact where the
        supernodes would cost more than one dense factorisation (sets covering nearly
        everything) and it holds at most :data:`DENSE_LIMIT` measurements.
    """

    def __init__(self, points, point_of, weights, covariance, nugget=0.0, rho=3.0,
                 order=None, scale=1.0, lam=1.5, alpha=1.0, dense_limit=None):
        P = torch.as_tensor(points, dtype=torch.float64)
        metric = (P / torch.as_tensor(scale, dtype=torch.float64)).numpy()
        point_of = np.asarray(point_of, dtype=np.int64)
        W = torch.as_tensor(weights, dtype=torch.float64)
        m = point_of.shape[0]
        if W.shape[0] != m:
            raise ValueError(f"Expected one row of weights per measurement ({m}); got "
                             f"{W.shape[0]}")
        nugget = torch.as_tensor(nugget, dtype=torch.float64).expand(m)
        order, lengths = maximin_order(metric) if order is None else order
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        # measurements follow their point, in the order given
        by_point = np.argsort(rank[point_of], kind="stable")
        self.perm = by_point                       # measurement ids in factor order
        counts = np.bincount(rank[point_of], minlength=order.shape[0])
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])   # first position of point k
        sets = conditioning_sets(metric, order, lengths, rho)
        self.order, self.lengths, self.rho = order, lengths, rho
        # a supernode's rows: the measurements of its union's points (in factor order); its
        # columns: its members' measurements
        nodes = []
        for members, union in supernodes(metric[order], lengths, sets, rho, lam, alpha):
            rows = _positions(union, first, counts)
            cols = _positions(members, first, counts)
            if cols.size:
                nodes.append((rows, np.searchsorted(rows, cols)))
        self.supernodes = len(nodes)
        self.escalated = 0.0
        ids = torch.as_tensor(by_point)
        point_of_t = torch.as_tensor(point_of)
        self.L = None
        if (m <= dense_limit if dense_limit is not None else
                m <= DENSE_LIMIT and m ** 3 <= sum(len(r) ** 3 for r, _ in nodes)):
            self._dense(P[point_of_t[ids]], W[ids], covariance, nugget[ids])
            return
        nodes.sort(key=lambda node: len(node[0]))
        rows, cols, vals = [], [], []
        start = 0
        while start < len(nodes):
            stop = start + 1
            while stop < len(nodes) and (stop - start + 1) * len(nodes[stop][0]) ** 2 \
                    <= ENTRIES_PER_BATCH:
                stop += 1
            chunk = nodes[start:stop]
            start = stop
            size = len(chunk[-1][0])
            g_max = max(len(c) for _, c in chunk)
            B = len(chunk)
            idx = np.zeros((B, size), dtype=np.int64)
            pad = np.zeros((B, size), dtype=bool)
            at = np.zeros((B, g_max), dtype=np.int64)       # the columns' places in the rows
            real = np.zeros((B, g_max), dtype=bool)
            for b, (s, c) in enumerate(chunk):
                idx[b, size - len(s):] = s                   # padding first
                pad[b, :size - len(s)] = True
                at[b, :len(c)] = c + size - len(s)
                real[b, :len(c)] = True
            meas = ids[torch.as_tensor(idx)]                 # measurement ids (B, size)
            Pm, Wm = P[point_of_t[meas]], W[meas]
            theta = covariance(Pm, Wm, Pm, Wm)
            padt = torch.as_tensor(pad)
            theta = theta + torch.diag_embed(torch.where(padt, 1.0, nugget[meas]))
            theta = torch.where(padt[:, :, None] ^ padt[:, None, :], 0.0, theta)
            L = self._cholesky(theta, padt)
            E = torch.zeros(B, size, g_max, dtype=theta.dtype)
            bb, jj = np.nonzero(real)
            E[bb, at[bb, jj], jj] = 1.0
            # columns of L^-T: solve L^T X = E; a column's entries below its place are zero
            X = torch.linalg.solve_triangular(L.transpose(-1, -2), E, upper=True).numpy()
            place = np.arange(size)
            keep = (~pad)[:, :, None] & real[:, None, :] & \
                (place[None, :, None] <= at[:, None, :])
            b3, r3, j3 = np.nonzero(keep)
            rows.append(idx[b3, r3])
            cols.append(idx[b3, at[b3, j3]])
            vals.append(X[b3, r3, j3])
        rows, cols, vals = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        self.U = scipy.sparse.csc_matrix((vals, (rows, cols)), shape=(m, m))
        self._lu = None

    #: the relative nugget a supernode's factorisation may escalate to before it is refused
    MAX_NUGGET = 1e-6

    def _cholesky(self, theta, pad):
        r"""Cholesky factors of the supernodes' covariances ``(B, s, s)``; one that fails in
        floating point gets :math:`10^k` times its diagonal's ``1e-14`` added, ``k = 0, 1,
        ...``, up to :attr:`MAX_NUGGET` (the largest used is kept as ``escalated``)."""
        L, info = torch.linalg.cholesky_ex(theta)
        bad = torch.nonzero(info).flatten()
        j = 1e-14
        while bad.numel():
            if j > self.MAX_NUGGET * (1 + 1e-9):
                raise NotPositiveDefiniteError(
                    f"Expected the covariance of {theta.shape[-1]} measurements to factor; "
                    f"it did not even with a relative nugget of {self.MAX_NUGGET:g}: "
                    f"measurements that repeat each other (duplicated points?)")
            diag = torch.where(pad[bad], 0.0, theta[bad].diagonal(dim1=-2, dim2=-1))
            Lb, ib = torch.linalg.cholesky_ex(theta[bad] + torch.diag_embed(j * diag))
            done = ib == 0
            L[bad[done]] = Lb[done]
            self.escalated = max(self.escalated, j)
            bad = bad[~done]
            j *= 10
        return L

    def _dense(self, Pm, Wm, covariance, nugget):
        r"""The exact factor, :math:`\Theta = L L^\top` in factor order (kept as ``L``;
        ``U`` is :math:`L^{-\top}`, not formed), the covariance built a block of rows at a
        time."""
        m = Pm.shape[0]
        step = max(1, ENTRIES_PER_BATCH // m)
        theta = torch.cat([covariance(Pm[i:i + step], Wm[i:i + step], Pm, Wm)
                           for i in range(0, m, step)])
        theta.diagonal().add_(nugget)
        self.L = self._cholesky(theta[None], torch.zeros(1, m, dtype=torch.bool))[0].numpy()
        self.U = None

    @property
    def dense(self):
        """Whether the factor is the exact one (:data:`DENSE_LIMIT`)."""
        return self.L is not None

    @property
    def nnz(self):
        """Entries of the factor."""
        if self.dense:
            return self.L.shape[0] * (self.L.shape[0] + 1) // 2
        return self.U.nnz

    def logdet(self):
        r""":math:`\log\det\Theta \approx -2 \sum_i \log U_{ii}`."""
        if self.dense:
            return float(2 * np.log(self.L.diagonal()).sum())
        return float(-2 * np.log(self.U.diagonal()).sum())

    def _unpermute(self, y):
        out = np.empty_like(y)
        out[self.perm] = y
        return out

    def precision_matvec(self, x):
        r""":math:`\Theta^{-1} x \approx U U^\top x` (measurement order in and out; ``x``
        ``(m,)`` or ``(m, k)``)."""
        xp = np.asarray(x, dtype=np.float64)[self.perm]
        if self.dense:
            y = scipy.linalg.solve_triangular(self.L, xp, lower=True, check_finite=False)
            return self._unpermute(scipy.linalg.solve_triangular(self.L, y, lower=True,
                                                                 trans="T", check_finite=False))
        return self._unpermute(self.U @ (self.U.T @ xp))

    def _factor(self):
        if self._lu is None:
            # a triangular matrix factors without fill: SuperLU in its natural order
            self._lu = scipy.sparse.linalg.splu(self.U.tocsc(), permc_spec="NATURAL",
                                                diag_pivot_thresh=0.0,
                                                options={"SymmetricMode": False})
        return self._lu

    def covariance_matvec(self, x):
        r""":math:`\Theta x \approx U^{-\top} U^{-1} x` (two triangular solves; ``x``
        ``(m,)`` or ``(m, k)``)."""
        xp = np.asarray(x, dtype=np.float64)[self.perm]
        if self.dense:
            return self._unpermute(self.L @ (self.L.T @ xp))
        lu = self._factor()
        y = lu.solve(xp)                 # U y = x
        z = lu.solve(y, trans="T")       # U^T z = y
        return self._unpermute(z)


def _positions(points, first, counts):
    """The factor positions of the measurements of ``points`` (positions in the order)."""
    c = counts[points]
    starts = np.repeat(first[points] - np.concatenate([[0], np.cumsum(c)[:-1]]), c)
    return starts + np.arange(int(c.sum()))
