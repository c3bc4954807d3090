r"""The integrated Wiener process: a GP prior on a function and its first ``q`` derivatives
in state-space form.

The state :math:`x(t) = (f, f', \dots, f^{(q)})` of a ``q``-times integrated Wiener process
of diffusion :math:`\sigma^2` moves between times :math:`t` and :math:`t + h` as

.. math:: x(t + h) \mid x(t) \sim \mathcal N\big(A(h)\, x(t),\; \sigma^2 Q(h)\big), \qquad
    A_{ij} = \frac{h^{j-i}}{(j-i)!}\;(j \ge i), \qquad
    Q_{ij} = \frac{h^{2q+1-i-j}}{(2q+1-i-j)\,(q-i)!\,(q-j)!},

(Särkkä & Solin 2019, ch. 6; the prior of probabilistic ODE solvers, Kersting, Sullivan &
Hennig 2020): a Markov process, so conditioning it on anything observed point by point
costs :math:`O(N)` in the number of times :math:`N`. Several outputs are independent
processes; their states are stacked output by output, ``C (q + 1)`` in all.
"""

import torch

__all__ = ["iwp_transition", "block_transition", "projection"]


def iwp_transition(q, h):
    r""":math:`A(h)` and :math:`Q(h)` (module docstring) for each step ``h`` ``(N,)``: two
    ``(N, q + 1, q + 1)`` tensors (unit diffusion)."""
    h = torch.as_tensor(h)
    i = torch.arange(q + 1, dtype=h.dtype)
    power = i[None, :] - i[:, None]                                   # j - i
    fact = torch.exp(torch.lgamma(power.clamp(min=0) + 1.0))
    A = torch.where(power >= 0, h[:, None, None] ** power.clamp(min=0) / fact,
                    torch.zeros((), dtype=h.dtype))
    e = 2 * q + 1 - i[:, None] - i[None, :]
    denom = e * torch.exp(torch.lgamma(q - i[:, None] + 1.0) + torch.lgamma(q - i[None, :] + 1.0))
    Q = h[:, None, None] ** e / denom
    return A, Q


def block_transition(q, h, diffusion):
    r""":math:`A(h)` and :math:`Q(h)` of ``C`` independent outputs, the ``c``-th with
    diffusion ``diffusion[c]`` ``(C,)``: two ``(N, C (q + 1), C (q + 1))`` tensors."""
    A1, Q1 = iwp_transition(q, h)
    C = diffusion.shape[0]
    eye = torch.eye(C, dtype=A1.dtype)
    A = torch.einsum("cd,nij->ncidj", eye, A1).reshape(len(h), C * (q + 1), C * (q + 1))
    Q = torch.einsum("cd,nij->ncidj", torch.diag_embed(diffusion.to(Q1)), Q1)
    return A, Q.reshape(len(h), C * (q + 1), C * (q + 1))


def projection(q, C, k, dtype=torch.float64):
    r""":math:`E_k` ``(C, C (q + 1))``: the ``k``-th derivative of each output from the
    stacked state."""
    E = torch.zeros(C, C * (q + 1), dtype=dtype)
    E[torch.arange(C), torch.arange(C) * (q + 1) + k] = 1.0
    return E

