r"""Does the sparse-Cholesky factorisation of the best GP PDE solver carry over to this
library's SE kernel? A measurement of the screening effect, with a complete implementation
of the factor to measure it with.

The sparse inverse Cholesky factor by Kullback-Leibler minimisation (Schaefer, Katzfuss &
Owhadi, SIAM J. Sci. Comput. 2021; for derivative measurements Chen, Owhadi & Schaefer,
Math. Comp. 2025, whose solver ``yifanc96/GP-PDEs-SparseCholesky`` uses a Matern 7/2
kernel). The measurements :math:`\phi_i = \sum_a W_{ia} \partial^a f(p_{k(i)})` sit at
points :math:`p`. The points are put in maximin order (each next point the farthest from
those before it; :math:`\ell_k` its distance to them), and the measurements of a point
follow it, its value first. Measurement :math:`i` is conditioned on the earlier
measurements within :math:`\rho \ell_{k(i)}` of its point: the precision becomes

.. math::
    \Theta^{-1} \approx U U^\top, \qquad
    U_{s_i, i} = \frac{\Theta_{s_i s_i}^{-1} e_i}{\sqrt{e_i^\top \Theta_{s_i s_i}^{-1} e_i}},

with :math:`s_i` the conditioning set and :math:`i` (the Vecchia approximation, KL-optimal
for that sparsity), exact when every :math:`s_i` holds all earlier measurements. All
measurements of one point share one factorisation (a supernode): for :math:`\Theta_{ss} =
L L^\top` with the point's measurements last, their columns are the last columns of
:math:`L^{-\top}`. :math:`U` is upper triangular in the ordering; :math:`\Theta x \approx
U^{-\top} U^{-1} x` is two sparse triangular solves.

The factor is only as good as the kernel's screening: conditioned on nearby points, far
points must carry little information. Matern kernels screen; the SE kernel, whose
conditional covariances decay slowly at lengthscales several times the spacing, may not.
``main`` prints, for the elliptic problem's measurement set (values on the boundary;
value, f_xx and f_yy at interior points of a grid of spacing h), the relative error of
:math:`\Theta x` and of :math:`\log\det\Theta` against the dense matrix, for SE
lengthscales and conditioning radii rho:

    python benchmarks/sparse_cholesky_se.py            # records in docs/results/sparse_cholesky_se.jsonl
    python benchmarks/sparse_cholesky_se.py --pcg --rhos 0,3,5   # CG iterations instead
"""

import argparse
import heapq
import json
import os
import sys
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from scipy.spatial import cKDTree

from pyro_pidkl.kernels.operators import hermite

__all__ = ["SparseInverseCholesky", "conditioning_sets", "maximin_order",
           "measurement_covariance"]


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
    nearest[first] = np.inf
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


def _pair_groups(indices):
    """``{n-key: [(sign, a, c), ...]}`` for every ordered pair of derivative indices."""
    groups = {}
    for ia, a in enumerate(indices):
        for ic, c in enumerate(indices):
            n = {}
            for j in a + c:
                n[j] = n.get(j, 0) + 1
            groups.setdefault(tuple(sorted(n.items())), []).append(((-1.0) ** len(a), ia, ic))
    return groups


def measurement_covariance(PA, WA, PB, WB, indices, lengthscale, variance):
    r"""Covariances of point measurements of an SE-ARD GP, in batches:
    :math:`\operatorname{cov}(\sum_a W^A_{pa} \partial^a f(P^A_p), \sum_c W^B_{qc}
    \partial^c f(P^B_q))
    = \sum_{a, c} W^A_{pa} W^B_{qc} (-1)^{|a|} k(P^A_p, P^B_q) \prod_j l_j^{-n_j}
    He_{n_j}((P^A_p - P^B_q)_j / l_j)`, :math:`n_j` the times input :math:`j` occurs in
    :math:`a` and :math:`c`.

    :param PA: ``(..., a, d)`` points; ``WA`` ``(..., a, len(indices))`` weights.
    :param PB: ``(..., b, d)``; ``WB`` ``(..., b, len(indices))``.
    :param indices: derivative indices (tuples of input columns; ``()`` the value).
    :param lengthscale: ``(d,)``; ``variance`` a scalar.
    :returns: ``(..., a, b)``.
    """
    ell = torch.as_tensor(lengthscale, dtype=PA.dtype).expand(PA.shape[-1])
    x = (PA[..., :, None, :] - PB[..., None, :, :]) / ell
    K = variance * torch.exp(-0.5 * (x * x).sum(-1))
    total = torch.zeros_like(K)
    for key, terms in _pair_groups(list(indices)).items():
        poly = None
        scale = 1.0
        for j, nj in key:
            h = hermite(nj, x[..., j])
            poly = h if poly is None else poly * h
            scale = scale * float(ell[j]) ** (-nj)
        weight = sum(sign * WA[..., :, ia, None] * WB[..., None, :, ic]
                     for sign, ia, ic in terms)
        total = total + (weight if poly is None else weight * poly) * scale
    return K * total


class SparseInverseCholesky:
    r"""The KL-optimal sparse factor :math:`U` of :math:`\Theta^{-1}` for measurements at
    points (module docstring), ``U`` upper triangular in the order ``perm``.

    :param points: ``(n, d)`` distinct points (standardised units).
    :param point_of: ``(m,)`` the point of each measurement.
    :param weights: ``(m, len(indices))`` each measurement's weights on ``indices``.
    :param indices: derivative indices (``()`` the value).
    :param lengthscale, variance: the SE-ARD kernel's.
    :param nugget: ``(m,)`` or a scalar added to each measurement's variance (noise).
    :param float rho: the conditioning radius in units of :math:`\ell` (larger: more
        accurate, denser; the error falls exponentially in it).
    :param int batch: supernodes factored per batched call.
    """

    def __init__(self, points, point_of, weights, indices, lengthscale, variance, nugget=0.0,
                 rho=3.0, batch=4096):
        P = torch.as_tensor(points, dtype=torch.float64)
        point_of = np.asarray(point_of, dtype=np.int64)
        W = torch.as_tensor(weights, dtype=torch.float64)
        m = point_of.shape[0]
        nugget = torch.as_tensor(nugget, dtype=torch.float64).expand(m)
        order, lengths = maximin_order(P.numpy())
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        # measurements follow their point, in the order given
        by_point = np.argsort(rank[point_of], kind="stable")
        self.perm = by_point                       # measurement ids in factor order
        position = np.empty(m, dtype=np.int64)
        position[by_point] = np.arange(m)
        counts = np.bincount(rank[point_of], minlength=order.shape[0])
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])   # first position of point k
        sets = conditioning_sets(P.numpy(), order, lengths, rho)
        self.order, self.lengths, self.rho = order, lengths, rho
        rows, cols, vals = [], [], []
        # supernodes: the measurements of earlier points in the set, then the point's own
        nodes = []
        for k in range(order.shape[0]):
            if counts[k] == 0:
                continue
            earlier = sets[k]
            members = (np.concatenate([np.arange(first[j], first[j] + counts[j])
                                       for j in earlier]) if len(earlier) else
                       np.zeros(0, dtype=np.int64))
            own = np.arange(first[k], first[k] + counts[k])
            nodes.append(np.concatenate([members, own]).astype(np.int64))
        nodes.sort(key=len)
        ids = torch.as_tensor(by_point)
        for start in range(0, len(nodes), batch):
            chunk = nodes[start:start + batch]
            size = len(chunk[-1])
            idx = np.zeros((len(chunk), size), dtype=np.int64)
            pad = np.zeros((len(chunk), size), dtype=bool)
            own_count = np.zeros(len(chunk), dtype=np.int64)
            for b, s in enumerate(chunk):
                idx[b, size - len(s):] = s              # padding first: the own last
                pad[b, :size - len(s)] = True
                own_count[b] = counts[rank[point_of[by_point[s[-1]]]]]
            meas = ids[torch.as_tensor(idx)]             # measurement ids (B, size)
            Pm = P[torch.as_tensor(point_of)[meas]]
            Wm = W[meas]
            theta = measurement_covariance(Pm, Wm, Pm, Wm, indices, lengthscale, variance)
            theta = theta + torch.diag_embed(nugget[meas])
            padt = torch.as_tensor(pad)
            theta = torch.where(padt[:, :, None] | padt[:, None, :], torch.zeros_like(theta),
                                theta)
            theta = theta + torch.diag_embed(padt.to(theta.dtype))
            L = torch.linalg.cholesky(theta)
            t_max = int(own_count.max())
            E = torch.zeros(len(chunk), size, t_max, dtype=theta.dtype)
            for b in range(len(chunk)):
                t = int(own_count[b])
                E[b, size - t:, t_max - t:] = torch.eye(t, dtype=theta.dtype)
            # the last columns of L^-T: solve L^T X = E
            X = torch.linalg.solve_triangular(L.transpose(-1, -2), E, upper=True)
            for b, s in enumerate(chunk):
                t = int(own_count[b])
                block = X[b, size - len(s):, t_max - t:].numpy()    # (len(s), t)
                for c in range(t):
                    col = s[len(s) - t + c]
                    keep = slice(0, len(s) - t + c + 1)            # upper triangular
                    rows.append(s[keep])
                    cols.append(np.full(len(s) - t + c + 1, col, dtype=np.int64))
                    vals.append(block[keep, c])
        rows, cols, vals = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        self.U = scipy.sparse.csc_matrix((vals, (rows, cols)), shape=(m, m))
        self.position = position
        self._lu = None

    @property
    def nnz(self):
        return self.U.nnz

    def logdet(self):
        r""":math:`\log\det\Theta \approx -2 \sum_i \log U_{ii}`."""
        return float(-2 * np.log(self.U.diagonal()).sum())

    def _permute(self, x):
        return np.asarray(x, dtype=np.float64)[self.perm]

    def _unpermute(self, y):
        out = np.empty_like(y)
        out[self.perm] = y
        return out

    def precision_matvec(self, x):
        r""":math:`\Theta^{-1} x \approx U U^\top x` (measurement order in and out)."""
        xp = self._permute(x)
        return self._unpermute(self.U @ (self.U.T @ xp))

    def _factor(self):
        if self._lu is None:
            # a triangular matrix factors without fill: SuperLU in its natural order
            self._lu = scipy.sparse.linalg.splu(self.U.tocsc(), permc_spec="NATURAL",
                                                diag_pivot_thresh=0.0,
                                                options={"SymmetricMode": False})
        return self._lu

    def covariance_matvec(self, x):
        r""":math:`\Theta x \approx U^{-\top} U^{-1} x` (two triangular solves)."""
        lu = self._factor()
        xp = self._permute(x)
        y = lu.solve(xp)                 # U y = x
        z = lu.solve(y, trans="T")       # U^T z = y
        return self._unpermute(z)


def elliptic_measurements(n):
    """Points of an ``n x n`` grid on the unit square; the value at every point, and
    f_xx and f_yy at the interior ones: ``(points, point_of, weights, indices)``."""
    g = torch.linspace(0, 1, n, dtype=torch.float64)
    pts = torch.cartesian_prod(g, g)
    edge = (pts == 0).any(1) | (pts == 1).any(1)
    inner = torch.nonzero(~edge).flatten().numpy()
    bnd = torch.nonzero(edge).flatten().numpy()
    point_of = np.concatenate([bnd, inner, inner, inner])
    W = np.zeros((len(point_of), 3))
    nb, ni = len(bnd), len(inner)
    W[:nb + ni, 0] = 1
    W[nb + ni:nb + 2 * ni, 1] = 1
    W[nb + 2 * ni:, 2] = 1
    return pts, point_of, W, [(), (0, 0), (1, 1)]


def measure(n, lengthscale, rho, nugget=1e-8, seed=0):
    """One factor against the dense covariance: a record."""
    pts, point_of, W, ind = elliptic_measurements(n)
    ell = torch.tensor([lengthscale, lengthscale], dtype=torch.float64)
    Pm, Wt = pts[point_of], torch.as_tensor(W)
    theta = measurement_covariance(Pm, Wt, Pm, Wt, ind, ell, 1.0)
    theta = theta + nugget * torch.eye(len(point_of), dtype=theta.dtype)
    v = np.random.default_rng(seed).standard_normal(len(point_of))
    exact = theta.numpy() @ v
    t0 = time.perf_counter()
    F = SparseInverseCholesky(pts, point_of, W, ind, ell, 1.0, nugget=nugget, rho=rho)
    seconds = time.perf_counter() - t0
    got = F.covariance_matvec(v)
    logdet = float(torch.linalg.slogdet(theta)[1])
    # KL(N(0, Theta) || N(0, (U U^T)^-1)), in nats: what the factor is optimal for
    m = len(point_of)
    Q = np.stack([F.precision_matvec(e) for e in np.eye(m)], 1)
    QT = Q @ theta.numpy()
    kl = 0.5 * (np.trace(QT) - m - np.linalg.slogdet(QT)[1])
    return {"kl_nats": float(kl), "h": 1 / (n - 1), "measurements": len(point_of), "lengthscale": lengthscale,
            "rho": rho, "nugget": nugget, "nnz_fraction": F.nnz / len(point_of) ** 2,
            "matvec_rel_error": float(np.linalg.norm(got - exact) / np.linalg.norm(exact)),
            "logdet_rel_error": abs(F.logdet() - logdet) / abs(logdet),
            "factor_s": seconds}


def pcg(n, lengthscale, rho, relative_nugget=1e-6, rtol=1e-8, max_iter=5000, seed=0):
    r"""Preconditioned conjugate gradients on :math:`\Theta x = v` (the elliptic problem's
    measurements, a nugget of ``relative_nugget`` times each measurement's variance, as the
    library's residual noise), preconditioned by the factor at radius ``rho``
    (:math:`\Theta^{-1} \approx U U^\top`; ``rho=None``: by the diagonal): the iterations
    to a relative residual of ``rtol``. A record."""
    pts, point_of, W, ind = elliptic_measurements(n)
    ell = torch.tensor([lengthscale, lengthscale], dtype=torch.float64)
    Pm, Wt = pts[point_of], torch.as_tensor(W)
    theta = measurement_covariance(Pm, Wt, Pm, Wt, ind, ell, 1.0)
    nugget = relative_nugget * theta.diagonal()
    T = (theta + torch.diag(nugget)).numpy()
    m = T.shape[0]
    v = np.random.default_rng(seed).standard_normal(m)
    A = scipy.sparse.linalg.LinearOperator((m, m), matvec=lambda x: T @ x, dtype=np.float64)
    t0 = time.perf_counter()
    if rho is None:
        inv_diag, nnz = 1.0 / T.diagonal(), m
        M = scipy.sparse.linalg.LinearOperator((m, m), matvec=lambda x: inv_diag * x,
                                               dtype=np.float64)
    else:
        F = SparseInverseCholesky(pts, point_of, W, ind, ell, 1.0, nugget=nugget.numpy(),
                                  rho=rho)
        nnz = F.nnz
        M = scipy.sparse.linalg.LinearOperator((m, m), matvec=F.precision_matvec,
                                               dtype=np.float64)
    factor_s = time.perf_counter() - t0
    count = [0]
    t0 = time.perf_counter()
    x, info = scipy.sparse.linalg.cg(A, v, rtol=rtol, maxiter=max_iter, M=M,
                                     callback=lambda _: count.__setitem__(0, count[0] + 1))
    return {"kind": "pcg", "h": 1 / (n - 1), "measurements": m, "lengthscale": lengthscale,
            "rho": rho, "relative_nugget": relative_nugget, "nnz_fraction": nnz / m ** 2,
            "iterations": count[0], "converged": info == 0,
            "rel_residual": float(np.linalg.norm(T @ x - v) / np.linalg.norm(v)),
            "factor_s": factor_s, "cg_s": time.perf_counter() - t0}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=21, help="grid points per side")
    p.add_argument("--lengthscales", default="0.05,0.1,0.2,0.3")
    p.add_argument("--rhos", default="2,3,4,5")
    p.add_argument("--pcg", action="store_true",
                   help="iterations of conjugate gradients preconditioned by the factor (and "
                        "by the diagonal, rho 0) instead of the factor's errors")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs",
                                                 "results", "sparse_cholesky_se.jsonl"))
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import records
    torch.set_num_threads(1)
    if args.pcg:
        with open(args.out, "a") as fh:
            for ls in (float(v) for v in args.lengthscales.split(",")):
                for rho in (float(v) for v in args.rhos.split(",")):
                    rec = pcg(args.n, ls, rho or None)
                    rec.update(threads=1, commit=records.commit())
                    records.append(fh, rec)
                    print(f"h={rec['h']:.3g} ({rec['measurements']} measurements) lengthscale "
                          f"{ls:<5} {'rho ' + str(rho) if rho else 'diagonal':<9} nnz "
                          f"{rec['nnz_fraction']:.3f}: {rec['iterations']} iterations "
                          f"(converged: {rec['converged']}, residual "
                          f"{rec['rel_residual']:.1e}), factor {rec['factor_s']:.1f} s, "
                          f"CG {rec['cg_s']:.1f} s", flush=True)
        return
    with open(args.out, "a") as fh:
        for ls in (float(v) for v in args.lengthscales.split(",")):
            for rho in (float(v) for v in args.rhos.split(",")):
                rec = measure(args.n, ls, rho)
                rec.update(threads=1, commit=records.commit())
                records.append(fh, rec)
                print(f"h={rec['h']:.3g} lengthscale {ls:<5} rho {rho:<4} nnz {rec['nnz_fraction']:.3f}"
                      f" of dense  KL {rec['kl_nats']:.3g} nats  Theta x rel. error {rec['matvec_rel_error']:.2e}  logdet "
                      f"{rec['logdet_rel_error']:.2e}  {rec['factor_s']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
