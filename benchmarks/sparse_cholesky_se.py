r"""Does the sparse-Cholesky factorisation of the best GP PDE solver carry over to this
library's SE kernel? A measurement of the screening effect.

The factor is the library's :class:`pyro_pidkl.gp.sparse_cholesky.SparseInverseCholesky`
(the KL-optimal sparse inverse Cholesky factor of Schaefer, Katzfuss & Owhadi, with the
derivative measurements of Chen, Owhadi & Schaefer; the sparse solver uses it with the
Matern 7/2 kernel), given here the SE covariances of weighted derivative measurements.

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
import os
import sys
import time

import numpy as np
import scipy.sparse.linalg
import torch

from pyro_pidkl.gp.sparse_cholesky import SparseInverseCholesky, maximin_order
from pyro_pidkl.kernels.operators import hermite

__all__ = ["maximin_order", "measurement_covariance", "se_factor"]


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


def se_factor(pts, point_of, W, ind, ell, variance, nugget, rho):
    """The library's factor on this module's SE covariances."""
    return SparseInverseCholesky(
        pts, point_of, W,
        lambda PA, WA, PB, WB: measurement_covariance(PA, WA, PB, WB, ind, ell, variance),
        nugget=nugget, rho=rho)


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
    F = se_factor(pts, point_of, W, ind, ell, 1.0, nugget, rho)
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
        F = se_factor(pts, point_of, W, ind, ell, 1.0, nugget.numpy(), rho)
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
