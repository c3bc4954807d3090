r"""Sparse variational GPs: :math:`M` inducing points, a whitened variational :math:`q(v)`,
a minibatched data term, and (optionally) the physics factor on a posterior function draw
at :math:`Z`.

With inducing inputs :math:`X_u` (standardised input space, learned), whitened inducing
values :math:`v = L_{uu}^{-1} u \sim \mathcal{N}(0, I)` and
:math:`q(v) = \mathcal{N}(\bar v, S)` (parameters ``u_loc`` and ``u_scale_tril``),

.. math::
    \mathcal{L} = \frac{N}{B}\sum_{i \in \mathcal{B}} \Big[
        \log\mathcal{N}(y_i \mid c + \mu_q(x_i), \sigma^2) - \frac{v_q(x_i)}{2\sigma^2}\Big]
      - \mathrm{KL}\big(q(v)\,\|\,\mathcal{N}(0, I)\big)
      + \gamma\, \mathbb{E}\log\mathcal{N}\big(\psi[f_{v,\epsilon}](Z) \mid 0, \kappa(Z, Z)\big),

    \mu(x; v) = k_{xu} L_{uu}^{-\top} v, \quad s(x) = k_{xx} - \|L_{uu}^{-1} k_{ux}\|^2,
    \quad f_{v,\epsilon}(x) = c + \mu(x; v) + \epsilon \sqrt{s(x)},

    \mu_q(x) = \mu(x; \bar v), \quad v_q(x) = s(x) + \|S^\top L_{uu}^{-1} k_{ux}\|^2

with the prior mean :math:`c = 0` (``mean="zero"``) or a learned constant
(``mean="constant"``), on the standardised scale as in the exact models.

The construction is that of Hensman, Fusi, Lawrence 2013 (and of
:func:`pyro.contrib.gp.util.conditional` with ``whiten=True``). The data term is
:math:`\mathbb{E}_{q(v)}\log\mathcal{N}(y_i \mid f_i, \sigma^2)` in closed form, as in
Pyro's ``VariationalSparseGP``, and the KL term is closed
form too (:attr:`SparseGP.elbo_class` is ``TraceMeanField_ELBO``): only the physics term
is Monte Carlo. In Pyro: the sample site ``u`` (whitened, prior :math:`\mathcal{N}(0, I)`)
with guide ``MultivariateNormal(u_loc, u_scale_tril + min_scale I)``, a ``data`` factor inside
``pyro.plate("points", N, subsample_size=B)`` (Pyro scales it by :math:`N/B`), and the same
``Z``, ``eps`` and ``physics`` sites as the exact models
(:class:`~pyro_pidkl.physics.PhysicsTerm`). Memory is
:math:`O(BM + M^2)` per step whatever :math:`N`; time per epoch is linear in :math:`N`.
"""

import functools

import pyro
import pyro.distributions as dist
import torch
from pyro.contrib.gp.util import conditional
from pyro.distributions import constraints
from pyro.infer import TraceMeanField_ELBO
from pyro.nn import PyroParam, pyro_method

from ...checks import positive_int
from ...gp.posterior import jittered_cholesky
from ...physics.posterior_draw import PosteriorDraw
from ...kernels.deep import feature_map
from .base import GPModel
from .pidkl import pidkl_parts

__all__ = ["InducingConditional", "SparseGP", "SparsePIDKL"]


class InducingConditional:
    r""":math:`f \mid v` of the whitened sparse GP in the interface of
    :class:`~pyro_pidkl.gp.posterior.GPPosterior` that
    :class:`~pyro_pidkl.physics.posterior_draw.PosteriorDraw` reads, so that the derivatives of
    the physics draw are in closed form here too:

    .. math:: \mu(x; v) = c + k(x, X_u)\,\alpha,\quad \alpha = L_{uu}^{-\top} v, \qquad
              s(x) = k(x, x) - k(x, X_u) K_{uu}^{-1} k(X_u, x),

    i.e. a GP posterior whose "training" inputs are :math:`X_u` and whose :math:`K^{-1}` is
    :math:`K_{uu}^{-1}` (through ``Luu``, differentiable by autograd).

    :param torch.Tensor Xu: inducing inputs ``(M, d)`` (standardised).
    :param torch.Tensor v: whitened inducing values ``(M,)``.
    :param kernel: the model's kernel.
    :param torch.Tensor Luu: Cholesky factor of :math:`K_{uu}` (with its jitter) ``(M, M)``.
    :param offset: the prior mean :math:`c` (a scalar tensor or ``0.``).
    """

    def __init__(self, Xu, v, kernel, Luu, offset=0.0):
        self.X, self.v, self.kernel, self.L, self.offset = Xu, v, kernel, Luu, offset
        self.feature_map = feature_map(kernel)
        self.features = None if self.feature_map is None else self.feature_map(Xu)
        self.alpha = torch.linalg.solve_triangular(Luu.T, v.unsqueeze(-1),
                                                   upper=True).squeeze(-1)

    def solve(self, B):
        r""":math:`K_{uu}^{-1} B` for ``B`` ``(M, r)``."""
        return torch.cholesky_solve(B, self.L)

    def quad_diag(self, B):
        r"""The diagonal of :math:`B^\top K_{uu}^{-1} B` ``(r,)``."""
        W = torch.linalg.solve_triangular(self.L, B, upper=False)
        return W.pow(2).sum(-2)

    def mean_var(self, U):
        r""":math:`\mu(U; v)`, :math:`s(U)` at standardised points ``U`` ``(B, d)``."""
        mu, var = conditional(U, self.X, self.kernel, self.v, None, self.L, whiten=True)
        return mu + self.offset, var

    def draw(self, eps, min_var=1e-12):
        r""":math:`f_{v,\epsilon}(U) = \mu(U; v) + \epsilon\sqrt{s(U)}` (standardised)."""
        def f(U):
            mu, var = self.mean_var(U)
            return mu + eps * var.clamp(min=min_var).sqrt()
        return f


class SparseGP(GPModel):
    r"""Sparse variational GP (module docstring), with an optional physics term.

    :param int num_inducing: :math:`M` inducing points.
    :param str inducing_init: where they start: ``"data"`` (a random subset of the training
        inputs) or ``"domain"`` (uniform draws from the domain of :math:`Z`, which covers
        where the physics acts, e.g. an extrapolation range).
    :param str physics_draw: the function pushed through the equation: ``"conditional"``
        (default) :math:`\mu(x; v) + \epsilon\sqrt{s(x)}` with :math:`v \sim q(v)`, or
        ``"marginal"``: :math:`\mu_q(x) + \epsilon\sqrt{v_q(x)}` from the marginal
        :math:`q(f(x))`, the exact model's construction.
    :param int batch_size: :math:`B`, data points per step (``None``: all, no subsampling).
    :param float prediction_batch: test points per block in :meth:`forward`.
    Other arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel`.
    """

    max_plate_nesting = 1
    #: the ELBO :func:`~pyro_pidkl.infer.svi.fit` uses: KL(q(v) || N(0, I)) in closed form. With
    #: ``Trace_ELBO`` the Monte Carlo term log q(v) at its own draw needs L_q^{-1}(v - m),
    #: which lost all precision once q's Cholesky factor became ill-conditioned: a fit at
    #: N = 1e4 reached a loss of -3.5e157 with the 1e-3 floor on its diagonal
    elbo_class = TraceMeanField_ELBO

    def __init__(self, X, y, input_names=None, num_inducing=100, batch_size=1000,
                 prediction_batch=10000, inducing_seed=0, inducing_init="data",
                 physics_draw="conditional", **kwargs):
        super().__init__(X, y, input_names, **kwargs)
        N = self.X.shape[0]
        num_inducing = positive_int(num_inducing, "num_inducing")
        if batch_size is not None:
            batch_size = positive_int(batch_size, "batch_size (or None)")
        if inducing_init == "domain" and self.physics is None:
            raise ValueError("Expected inducing_init='data' for a model without a physics term "
                             "(the domain of Z is the physics term's); got 'domain'")
        if physics_draw not in ("marginal", "conditional"):
            raise ValueError(f"Expected physics_draw 'marginal' or 'conditional'; got "
                             f"{physics_draw!r}")
        self.physics_draw = physics_draw
        self.batch_size = None if batch_size is None or batch_size >= N else int(batch_size)
        self.prediction_batch = int(prediction_batch)
        gen = torch.Generator().manual_seed(int(inducing_seed))
        dtype = self.X.dtype
        if inducing_init == "data":
            idx = torch.randperm(N, generator=gen)[:int(num_inducing)].to(self.X.device)
            Xu = self.X_s[idx].clone()
        elif inducing_init == "domain":
            with pyro.poutine.block(), torch.random.fork_rng():
                torch.manual_seed(int(inducing_seed))
                Xu = self.standardizer.x_to_model(
                    self.physics.domain.distribution(int(num_inducing)).sample())
        else:
            raise ValueError(f"Expected inducing_init 'data' or 'domain'; got {inducing_init!r}")
        self.Xu = PyroParam(Xu)
        M = Xu.shape[0]
        self.u_loc = PyroParam(torch.zeros(M, dtype=dtype, device=self.X.device))
        self.u_scale_tril = PyroParam(0.1 * torch.eye(M, dtype=dtype, device=self.X.device),
                                      constraints.lower_cholesky)  # plus min_scale * I

    #: floor on the diagonal of the scale of q(v) (whitened units): without it the optimiser
    #: drove it towards 0 until L^{-1}(u - m) lost all precision and log q(u) reached -1e21
    #: (a fit at N = 1e4, 140 steps); with it q(v) keeps a standard deviation >= 1e-3
    min_scale = 1e-3

    @property
    def q_scale_tril(self):
        """Scale of :math:`q(v)`: ``u_scale_tril`` with ``min_scale`` added on its diagonal."""
        M = self.u_loc.shape[0]
        return self.u_scale_tril + self.min_scale * torch.eye(M, dtype=self.u_loc.dtype,
                                                              device=self.u_loc.device)

    @property
    def num_inducing(self):
        return self.Xu.shape[0]

    def _Luu(self):
        Xu = self.Xu
        Kuu = self.kernel(Xu)
        M = Xu.shape[0]
        return jittered_cholesky(Kuu + 1e-6 * Kuu.diagonal().mean() * torch.eye(
            M, dtype=Xu.dtype, device=Xu.device), 1e-8, self.max_jitter,
            what=f"{M} x {M} inducing kernel matrix")

    def conditional(self, U, v, Luu, full_cov=False):
        r""":math:`c + \mu(U; v)` and :math:`s(U)` at standardised points ``U`` ``(B, d)``
        given whitened inducing values ``v`` ``(M,)`` (or ``q(v)`` when ``v`` is ``None``)."""
        if v is None:
            mu, var = conditional(U, self.Xu, self.kernel, self.u_loc, self.q_scale_tril, Luu,
                                  full_cov=full_cov, whiten=True)
        else:
            mu, var = conditional(U, self.Xu, self.kernel, v, None, Luu, full_cov=full_cov,
                                  whiten=True)
        return mu + self.prior_mean(), var

    def posterior_draw(self, draw_args, eps):
        r"""The draw :math:`f_{v,\epsilon}(x) = m_y + s_y(\mu(u; v) + \epsilon\sqrt{s(u)})`
        as a function of user-unit points: a
        :class:`~pyro_pidkl.physics.posterior_draw.PosteriorDraw` of
        :class:`InducingConditional` (derivatives in closed form) for one draw of ``v``
        unless ``derivatives="autograd"``; with ``physics_draw="marginal"`` or vectorised
        particles, a plain function differentiated by autograd."""
        v, Luu = draw_args
        st = self.standardizer
        if self.closed_form_gradients and v is not None and v.dim() == 1:
            return PosteriorDraw(InducingConditional(self.Xu, v, self.kernel, Luu,
                                                     self.prior_mean()), eps, st)

        def f(x):
            mu, var = self.conditional(st.x_to_model(x), v, Luu)
            return st.f_to_user(mu + eps * var.clamp(min=1e-12).sqrt())
        return f

    @pyro_method
    def model(self):
        M = self.num_inducing
        dtype, device = self.X.dtype, self.X.device
        v = pyro.sample("u", dist.MultivariateNormal(                   # whitened, (M,)
            torch.zeros(M, dtype=dtype, device=device),
            scale_tril=torch.eye(M, dtype=dtype, device=device)))
        Luu = self._Luu()
        N = self.X.shape[0]
        with pyro.plate("points", N, subsample_size=self.batch_size) as idx:
            # E_q(v) log N(y_i | f_i, sigma^2) in closed form from the marginal q(f_i), as in
            # Pyro's VariationalSparseGP: no Monte Carlo noise in the data term
            mu, var = self.conditional(self.X_s[idx], None, Luu)
            # var_i >= 0 exactly; rounding in k_ii - q_ii can make it negative when K_uu is
            # ill-conditioned, and a negative var_i would be an unbounded reward
            var = var.clamp(min=0.0)
            log_lik = (dist.Normal(mu, self.noise.sqrt()).log_prob(self.y_s[idx])
                       - var / (2 * self.noise))
            pyro.factor("data", log_lik.expand(v.shape[:-1] + log_lik.shape))
        if self.physics is not None and self.physics.gamma > 0:
            # Z ~ p(Z), eps ~ N(0, 1), gamma log N(psi[f_eps](Z) | 0, kappa(Z, Z)) on a draw
            v_draw = None if self.physics_draw == "marginal" else v
            self.physics.factor(functools.partial(self.posterior_draw, (v_draw, Luu)))

    @pyro_method
    def guide(self):
        """``q(u) = MVN(u_loc, u_scale_tril + min_scale I)``; the physics term's ``Z``, ``eps``
        from their priors and its equation guide, in the order the model meets the sites
        (``TraceMeanField_ELBO`` checks the order)."""
        pyro.sample("u", dist.MultivariateNormal(self.u_loc, scale_tril=self.q_scale_tril))
        if self.physics is not None and self.physics.gamma > 0:
            self.physics.guide()

    def _predict(self, U, full_cov):
        r"""Mean and variance of :math:`f` under :math:`q(v)` at standardised points ``U``,
        in blocks of ``prediction_batch`` points (marginal variances only)."""
        if full_cov:
            raise ValueError(f"{type(self).__name__}.forward returns marginal variances only; got "
                             "full_cov=True")
        Luu = self._Luu()
        means, variances = [], []
        for block in torch.split(U, self.prediction_batch):
            mu, var = self.conditional(block, None, Luu)
            means.append(mu)
            variances.append(var.clamp(min=0.0))
        return torch.cat(means), torch.cat(variances)


class SparsePIDKL(SparseGP):
    r"""Sparse variational PI-DKL: :class:`SparseGP` with the deep kernel and a
    :class:`~pyro_pidkl.physics.PhysicsTerm` (``gamma = 0`` gives sparse DKL).

    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param gamma, m, domain, source_inputs, draw, source_jitter, equation_guide: the physics
        term's.
    :param feature_net, feature_dim, skip_inputs, seed: the deep kernel's
        (:func:`~pyro_pidkl.kernels.dkl_kernel`; ``seed`` fixes the network's initial weights).
    Other arguments as :class:`SparseGP`.
    """

    def __init__(self, X, y, equation, input_names=None, gamma=1.0, m=10, domain=None,
                 source_inputs="equation", draw="function", source_jitter=1e-6,
                 equation_guide=None, feature_net=None, feature_dim=None, skip_inputs=False,
                 seed=None, **kwargs):
        kernel, physics = pidkl_parts(X, equation, gamma, m, domain, source_inputs, draw,
                                      source_jitter, equation_guide, feature_net, feature_dim,
                                      skip_inputs, seed, kwargs.get("dtype", torch.float64))
        super().__init__(X, y, input_names, kernel=kernel, physics=physics, **kwargs)
