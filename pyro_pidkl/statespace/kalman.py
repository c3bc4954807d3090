r"""Kalman filtering and smoothing in :math:`O(\log N)` sequential steps: the parallel
(associative-scan) forms of Särkkä & García-Fernández (2021, "Temporal parallelization of
Bayesian smoothers", IEEE TAC), on batched tensors, differentiable by autograd.

The model has states :math:`x_0, \dots, x_{N-1}` at ``N`` nodes,

.. math:: x_0 \sim \mathcal N(m_0, P_0), \qquad
    x_n \mid x_{n-1} \sim \mathcal N(A_n x_{n-1}, Q_n), \qquad
    z_n \mid x_n \sim \mathcal N(H_n x_n, R_n),

with some entries of :math:`z_n` missing (``mask``). :func:`kalman_filter` returns the
filtered means and covariances and the log evidence

.. math:: \log p(z_{0:N-1}) = \sum_n \log \mathcal N\big(z_n \mid H_n m_n^-,\;
    H_n P_n^- H_n^\top + R_n\big)

(:math:`m_n^-, P_n^-` the one-step predictions), :func:`rts_smoother` the smoothed ones.
Each is a prefix (or suffix) scan of an associative operator on per-node elements, run in
:math:`O(\log N)` batched steps (:func:`_scan`), so a Python loop of a few hundred tensor
operations serves any ``N``; the sequential forms
(:func:`sequential_filter`) are the reference the tests hold them to.
"""

import math

import torch

__all__ = ["kalman_filter", "rts_smoother", "sequential_filter"]

#: the most nodes scanned by doubling; longer sequences by the work-efficient scan (faster
#: from a few dozen nodes on)
STEP_EFFICIENT = 64


def _T(M):
    return M.transpose(-1, -2)


def _sym(M):
    return 0.5 * (M + _T(M))


def _masked(H, z, R, mask):
    """Missing entries: a zero row of ``H``, a zero datum, unit noise (its evidence is then
    exactly ``N(0 | 0, 1)``, taken off below)."""
    if mask is None:
        return H, z, R, 0
    keep = mask.to(H.dtype)
    H = H * keep[..., None]
    z = z * keep
    R = torch.where(mask[..., None] & mask[..., None, :], R,
                    torch.diag_embed(1.0 - keep))
    return H, z, R, int((~mask).sum())


def _filter_elements(A, Q, H, R, z, m0, P0):
    """The elements :math:`(A, b, C, \\eta, J)` of each node (Särkkä & García-Fernández,
    Lemma 8)."""
    D = m0.shape[-1]
    eye = torch.eye(D, dtype=m0.dtype)
    # node 0: the prior, updated by its datum
    S0 = H[0] @ P0 @ _T(H[0]) + R[0]
    K0 = _T(torch.linalg.solve(S0, H[0] @ P0))
    b0 = m0 + K0 @ (z[0] - H[0] @ m0)
    C0 = _sym(P0 - K0 @ S0 @ _T(K0))
    # nodes 1..N-1
    A1, Q1, H1, R1, z1 = A[1:], Q[1:], H[1:], R[1:], z[1:]
    S = H1 @ Q1 @ _T(H1) + R1
    HQ = H1 @ Q1
    K = _T(torch.linalg.solve(S, HQ))                         # Q H' S^-1
    IKH = eye - K @ H1
    Ae = IKH @ A1
    b = (K @ z1[..., None])[..., 0]
    Ce = _sym(IKH @ Q1)
    HA = H1 @ A1
    Sinv_HA = torch.linalg.solve(S, HA)
    eta = (_T(HA) @ torch.linalg.solve(S, z1[..., None]))[..., 0]
    J = _sym(_T(HA) @ Sinv_HA)
    zeros = torch.zeros(1, D, D, dtype=m0.dtype)
    return (torch.cat([zeros, Ae]), torch.cat([b0[None], b]), torch.cat([C0[None], Ce]),
            torch.cat([torch.zeros(1, D, dtype=m0.dtype), eta]), torch.cat([zeros, J]))


def _filter_combine(first, then):
    r""":math:`a_i \otimes a_j` (Särkkä & García-Fernández, Lemma 9), with the products that
    share a left factor stacked into one (the cost is the number of operations)."""
    Ai, bi, Ci, ei, Ji = first
    Aj, bj, Cj, ej, Jj = then
    D = Ai.shape[-1]
    eye = torch.eye(D, dtype=Ai.dtype)
    M = torch.linalg.inv(eye + Ci @ Jj)                        # (I + C_i J_j)^-1
    T1 = Ci @ torch.cat([ej[..., None], _T(Aj)], -1)           # [C_i e_j, C_i A_j']
    X = (Aj @ M) @ torch.cat([Ai, bi[..., None] + T1[..., :1], T1[..., 1:]], -1)
    T2 = Jj @ torch.cat([bi[..., None], Ai], -1)               # [J_j b_i, J_j A_i]
    Y = (_T(Ai) @ _T(M)) @ torch.cat([ej[..., None] - T2[..., :1], T2[..., 1:]], -1)
    return (X[..., :D], X[..., D] + bj, _sym(X[..., D + 1:] + Cj), Y[..., 0] + ei,
            _sym(Y[..., 1:] + Ji))


def _scan(elements, combine, reverse=False):
    """Inclusive prefix (suffix, ``reverse``) scan of ``combine`` over the leading axis.
    Up to :data:`STEP_EFFICIENT` elements by doubling (Hillis & Steele 1986: ``log2 N``
    batched steps, ``N log2 N`` combinations); beyond, pairs combined, the half scanned,
    the other half filled in (Blelloch 1990, as ``jax.lax.associative_scan``: ``2 log2 N``
    steps, ``2 N`` combinations: batched products of small matrices cost by the matrix, so
    the work counts)."""
    if reverse:
        flipped = tuple(e.flip(0) for e in elements)
        out = _scan(flipped, lambda a, b: combine(b, a))
        return tuple(e.flip(0) for e in out)
    if elements[0].shape[0] <= STEP_EFFICIENT:
        return _doubling_scan(elements, combine)
    N = elements[0].shape[0]
    if N < 2:
        return elements
    odd = _scan(combine(tuple(e[0:N - 1:2] for e in elements),
                        tuple(e[1::2] for e in elements)), combine)     # prefixes at 1, 3, ...
    rest = tuple(e[2::2] for e in elements)                               # positions 2, 4, ...
    even = combine(tuple(o[:rest[0].shape[0]] for o in odd), rest)
    out = []
    for e, o, v in zip(elements, odd, even):
        evens = torch.cat([e[:1], v])                      # positions 0, 2, 4, ...
        pairs = torch.stack([evens[:o.shape[0]], o], 1).reshape(2 * o.shape[0], *e.shape[1:])
        out.append(torch.cat([pairs, evens[o.shape[0]:]]))  # the last even one, if N is odd
    return tuple(out)


def _doubling_scan(elements, combine):
    N, k = elements[0].shape[0], 1
    while k < N:
        new = combine(tuple(e[:-k] for e in elements), tuple(e[k:] for e in elements))
        elements = tuple(torch.cat([e[:k], n]) for e, n in zip(elements, new))
        k *= 2
    return elements


def kalman_filter(A, Q, H, R, z, m0, P0, mask=None, parts=False):
    r"""Filtered means ``(N, D)`` and covariances ``(N, D, D)``, and the log evidence
    (module docstring); with ``parts``, instead of the log evidence the pair
    :math:`(\sum_n v_n^\top S_n^{-1} v_n, \sum_n \log\det S_n)` of the innovations
    :math:`v_n` and their covariances :math:`S_n` over the data present (what a diffusion
    that scales every covariance is calibrated from).

    :param A: transitions ``(N, D, D)`` (``A[0]`` is not used).
    :param Q: their covariances ``(N, D, D)``.
    :param H: measurement matrices ``(N, M, D)``.
    :param R: measurement covariances ``(N, M, M)``.
    :param z: the data ``(N, M)``.
    :param m0: the prior mean of :math:`x_0` ``(D,)``; ``P0`` its covariance ``(D, D)``.
    :param mask: ``(N, M)`` bool, ``False`` where a datum is missing (default: none).
    """
    H, z, R, missing = _masked(H, z, R, mask)
    elements = _filter_elements(A, Q, H, R, z, m0, P0)
    _, m, P, _, _ = _scan(elements, _filter_combine)
    # the evidence from the one-step predictions, all nodes at once
    m_pred = torch.cat([m0[None], (A[1:] @ m[:-1, :, None])[..., 0]])
    P_pred = torch.cat([P0[None], _sym(A[1:] @ P[:-1] @ _T(A[1:]) + Q[1:])])
    quad, logdet = _innovations(H, R, z, m_pred, P_pred)
    if parts:
        return m, P, (quad, logdet)
    # a missing entry's term is -log(2 pi)/2 exactly (unit noise, zero datum): taken off
    return m, P, -0.5 * (quad + logdet + (z.numel() - missing) * math.log(2 * math.pi))


def _innovations(H, R, z, m_pred, P_pred):
    S = _sym(H @ P_pred @ _T(H) + R)
    L = torch.linalg.cholesky(S)
    v = z - (H @ m_pred[..., None])[..., 0]
    w = torch.linalg.solve_triangular(L, v[..., None], upper=False)[..., 0]
    return (w ** 2).sum(), 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum()


def _smoother_combine(first, then):
    Ei, gi, Li = first
    Ej, gj, Lj = then
    return (Ei @ Ej, (Ei @ gj[..., None])[..., 0] + gi, _sym(Ei @ Lj @ _T(Ei) + Li))


def rts_smoother(A, Q, m, P):
    r"""Smoothed means ``(N, D)`` and covariances ``(N, D, D)`` from the filtered ones
    (:func:`kalman_filter`), by the parallel Rauch-Tung-Striebel smoother; also the gains
    :math:`E_n = P_n A_{n+1}^\top (A_{n+1} P_n A_{n+1}^\top + Q_{n+1})^{-1}` ``(N - 1, D,
    D)``."""
    A1, Q1 = A[1:], Q[1:]
    Pp = _sym(A1 @ P[:-1] @ _T(A1) + Q1)
    E = _T(torch.linalg.solve(Pp, A1 @ P[:-1]))               # P A' Pp^-1 (Pp symmetric)
    g = m[:-1] - (E @ A1 @ m[:-1, :, None])[..., 0]
    L = _sym(P[:-1] - E @ A1 @ P[:-1])
    D = m.shape[-1]
    elements = (torch.cat([E, torch.zeros(1, D, D, dtype=m.dtype)]),
                torch.cat([g, m[-1:]]), torch.cat([L, P[-1:]]))
    _, ms, Ps = _scan(elements, _smoother_combine, reverse=True)
    return ms, Ps, E


def sequential_filter(A, Q, H, R, z, m0, P0, mask=None):
    """The textbook Kalman filter, node by node: the reference for :func:`kalman_filter`
    (same arguments and returns)."""
    H, z, R, missing = _masked(H, z, R, mask)
    ms, Ps, ll = [], [], 0.0
    m, P = m0, P0
    for n in range(z.shape[0]):
        if n:
            m, P = A[n] @ m, A[n] @ P @ A[n].T + Q[n]
        S = H[n] @ P @ H[n].T + R[n]
        v = z[n] - H[n] @ m
        ll = ll + torch.distributions.MultivariateNormal(H[n] @ m, _sym(S)).log_prob(z[n])
        K = P @ H[n].T @ torch.linalg.inv(S)
        m, P = m + K @ v, _sym(P - K @ S @ K.T)
        ms.append(m)
        Ps.append(P)
    return torch.stack(ms), torch.stack(Ps), ll + 0.5 * math.log(2 * math.pi) * missing
