r"""Physics Informed Deep Kernel Learning (Wang, Xing, Kirby, Zhe, AISTATS 2022).

A deep-kernel GP of :math:`f` respects :math:`\psi[f] = g` with :math:`g \sim GP(0, \kappa)`
unknown. A posterior function draw :math:`f_\epsilon = \mu + \epsilon\sqrt{v}` is pushed
through :math:`\psi` by autodiff at random points :math:`Z \sim p(Z)`, and the collapsed
ELBO is

.. math::
    \mathcal{L} = \log \mathcal{N}(y \mid 0, K + \sigma^2 I)
        + \gamma\, \mathbb{E}_{p(Z)} \mathbb{E}_{p(\epsilon)}
          \log \mathcal{N}\big(h(Z, \epsilon) \mid 0, \kappa(Z, Z)\big),
    \qquad h(Z, \epsilon) = \psi[f_\epsilon](Z).

In Pyro: two factor sites (``data``, ``physics``) and two sample sites (``Z``, ``eps``)
whose guide is their prior, so that ``Trace_ELBO`` gives exactly :math:`-\mathcal{L}`.
"""

import math

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_median, init_to_value
from pyro.nn import pyro_method

from ..domain import Box
from ..draw import PosteriorDraw
from ..errors import NonFiniteError
from ..kernels import batched, se_ard
from ..nn import smoothness_order
from ..physics.equation import Equation, source_columns
from ..posterior import jittered_cholesky
from .baselines import DKL
from .exact_gp import own_parameters

__all__ = ["PIDKL"]


class PIDKL(DKL):
    r"""The PI-DKL hybrid model.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param input_names: names of the ``d`` inputs; default the equation's inputs when it
        declares all ``d`` of them, else ``x0, x1, ...``.
    :param float gamma: weight :math:`\gamma \ge 0` of the physics term.
    :param int m: number of collocation points :math:`Z` per draw.
    :param domain: :math:`p(Z)`: a :class:`~pyro_pidkl.domain.Box` (default: the data's box)
        or :class:`~pyro_pidkl.domain.Gaussian`, in user units.
    :param source_inputs: inputs of the source kernel :math:`\kappa`: ``"equation"``
        (default, those the equation differentiates), ``"all"``, or a tuple of names.
    :param str eps: ``"draw"`` (paper: one :math:`\epsilon` per function draw), ``"point"``
        (one per collocation point, as the paper's public code) or ``"mean"`` (no draw: the
        physics term acts on the posterior mean :math:`\mu` only, :math:`\epsilon = 0`, and
        there is no ``eps`` site).
    :param float source_jitter: relative nugget added to :math:`\kappa(Z, Z)`.
    :param str derivatives: ``"closed_form"`` (default: derivatives of the draw up to order
        two from the kernel's, :mod:`pyro_pidkl.draw`; other kernels and higher orders use
        autograd) or ``"autograd"`` (autograd through the posterior and its Cholesky factor
        for every order and for the data term: the textbook route, slower).
    Other arguments as :class:`~pyro_pidkl.models.baselines.DKL`.

    Sites of :meth:`model` (``S`` particles when vectorised): ``data`` factor ``()``,
    ``Z`` ``(S, m, d)``, ``eps`` ``(S, 1)`` or ``(S, m)``, ``physics`` factor ``(S,)``.

    **Bayesian equation parameters.** A parameter declared with a prior,
    ``Parameter(init, prior=dist.LogNormal(...))``, is a sample site ``equation.<name>`` of
    the model. The guide then adds an :class:`~pyro.infer.autoguide.AutoNormal` over those
    sites alone (started at ``init``; ``Z`` and ``eps`` keep their priors), so SVI learns
    a Gaussian (in unconstrained space) posterior :math:`q(\theta)`;
    :meth:`equation_posterior` summarises it. Pass ``equation_guide`` to use another guide
    over those sites.
    """

    def __init__(self, X, y, equation, input_names=None, gamma=1.0, m=10, domain=None,
                 source_inputs="equation", eps="draw", source_jitter=1e-6, equation_guide=None,
                 derivatives="closed_form", **kwargs):
        if not isinstance(equation, Equation):
            raise TypeError(f"Expected equation to be a pyro_pidkl.physics.Equation; got "
                            f"{type(equation).__name__}")
        if input_names is None and equation.inputs is not None:
            shape = getattr(X, "shape", None)
            ncol = shape[1] if shape is not None and len(shape) == 2 else 1
            if ncol == len(equation.inputs):
                input_names = equation.inputs
        super().__init__(X, y, input_names, **kwargs)
        try:
            gamma = float(gamma)
        except (TypeError, ValueError):
            raise TypeError(f"Expected gamma to be a number; got {gamma!r}") from None
        if not (gamma >= 0 and math.isfinite(gamma)):
            raise ValueError(f"Expected gamma >= 0 (finite); got {gamma}")
        if isinstance(m, bool) or int(m) != m or m < 1:
            raise ValueError(f"Expected m (number of collocation points) to be an integer "
                             f">= 1; got {m!r}")
        if derivatives not in ("closed_form", "autograd"):
            raise ValueError(f"Expected derivatives to be 'closed_form' or 'autograd'; got "
                             f"{derivatives!r}")
        self.derivatives = derivatives
        self.closed_form_gradients = derivatives == "closed_form"
        if eps not in ("draw", "point", "mean"):
            raise ValueError(f"Expected eps to be 'draw', 'point' or 'mean'; got {eps!r}")
        equation.check_inputs(self.input_names)
        self.equation = equation
        self.gamma, self.m, self.eps_mode, self.source_jitter = gamma, int(m), eps, source_jitter
        self.domain = (domain or Box()).resolve(self.X, self.input_names)
        cols = source_columns(source_inputs, equation, self.input_names)
        self.source_kernel = se_ard(self.input_dim, cols, dtype=self.X.dtype)
        order = smoothness_order(self.feature_net)
        self._max_order = order
        self._why = (f" because the feature map {type(self.feature_net).__name__} has a "
                     "piecewise-linear or C1 activation (ReLU-like: autograd returns 0 for its "
                     "second derivatives); use a smooth activation such as nn.Tanh or nn.SiLU"
                     if math.isfinite(order) else "")
        self._probe_equation()
        self.bayesian_sites = tuple(f"equation.{n}" for n, spec in equation.specs.items()
                                    if spec.prior is not None and not spec.fixed)
        if equation_guide is None and self.bayesian_sites:
            init = {f"equation.{n}": spec.init.to(self.X.dtype)
                    for n, spec in equation.specs.items() if spec.prior is not None}
            equation_guide = AutoNormal(poutine.block(self.model, expose=self.bayesian_sites),
                                        init_loc_fn=init_to_value(values=init,
                                                                  fallback=init_to_median),
                                        init_scale=0.05)
        self.equation_guide = equation_guide

    def _apply(self, fn, *args, **kwargs):
        # model.to(device) / .double(): the domain's tensors follow the module's
        out = super()._apply(fn, *args, **kwargs)
        self.domain = self.domain.apply(fn)
        return out

    # -- configuration helpers ---------------------------------------------------------
    def _probe_equation(self):
        """Run the equation once on a cheap smooth surrogate of the GP (the feature map) so
        that bad equations fail at construction, not after minutes of training."""
        Z = self.X[:2]

        def surrogate(x):
            return self.feature_net(self.standardizer.x_to_model(x)).sum(-1)
        self.equation.residual(surrogate, Z, self.input_names, self._max_order, self._why)

    def eps_distribution(self):
        """:math:`p(\\epsilon)`: ``(1,)`` per draw or ``(m,)`` per point, standard normal."""
        size = 1 if self.eps_mode == "draw" else self.m
        zero = torch.zeros(size, dtype=self.X.dtype, device=self.X.device)
        return dist.Normal(zero, 1.0).to_event(1)

    def sample_eps(self):
        """The ``eps`` site (a zero tensor without a site when ``eps="mean"``)."""
        if self.eps_mode == "mean":
            return torch.zeros(1, dtype=self.X.dtype, device=self.X.device)
        return pyro.sample("eps", self.eps_distribution())

    # -- the model -----------------------------------------------------------------------
    def posterior_draw(self, posterior, eps):
        r"""The draw :math:`f_\epsilon(x) = m_y + s_y(\mu(u) + \epsilon\sqrt{v(u)})`,
        :math:`u = (x - m_x)/s_x`: a :class:`~pyro_pidkl.draw.PosteriorDraw`, a function of
        user-unit points ``(M, d) -> (M,)`` whose derivatives at the collocation points are
        in closed form unless ``derivatives="autograd"``."""
        return PosteriorDraw(posterior, eps, self.standardizer,
                             closed_form=self.closed_form_gradients)

    def residual(self, posterior, Z, eps):
        r""":math:`h(Z, \epsilon) = \psi[f_\epsilon](Z)`, shape ``Z.shape[:-1]``."""
        batch, d = Z.shape[:-1], Z.shape[-1]
        eps = eps.expand(batch).reshape(-1)
        f = self.posterior_draw(posterior, eps)
        h = self.equation.residual(f, Z.reshape(-1, d), self.input_names, self._max_order,
                                   self._why)
        return h.reshape(batch)

    def physics_log_prob(self, h, Z):
        r""":math:`\log \mathcal{N}(h \mid 0, \kappa(Z, Z))`, reduced over the ``m`` points."""
        if not torch.isfinite(h).all():
            bad = int((~torch.isfinite(h)).sum())
            raise NonFiniteError(
                f"The residual of equation {self.equation.name!r} is NaN/inf at {bad} of "
                f"{h.numel()} collocation points (parameters: {self.equation_parameters()})")
        Sigma = batched(self.source_kernel, self.standardizer.x_to_model(Z))
        m = Sigma.shape[-1]
        scale = self.source_kernel.variance
        Sigma = Sigma + (self.source_jitter * scale) * torch.eye(m, dtype=Sigma.dtype,
                                                                 device=Sigma.device)
        L = jittered_cholesky(Sigma, 1e-6, 1e-1, what=f"{m} x {m} source kernel matrix")
        # MultivariateNormal(0, scale_tril=L).log_prob(h), without its per-call validation
        w = torch.linalg.solve_triangular(L, h.unsqueeze(-1), upper=False).squeeze(-1)
        return (-0.5 * w.pow(2).sum(-1) - L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
                - 0.5 * m * math.log(2 * math.pi))

    def physics_factor(self, draw_args):
        """The ``Z`` and ``eps`` sites and the ``physics`` factor on the draw that
        :meth:`posterior_draw` makes of ``draw_args``."""
        Z = pyro.sample("Z", self.domain.distribution(self.m))   # (..., m, d)
        eps = self.sample_eps()                                  # (..., 1) or (..., m)
        h = self.residual(draw_args, Z, eps)                     # (..., m)
        pyro.factor("physics", self.gamma * self.physics_log_prob(h, Z))

    def sample_physics_priors(self):
        """The guide's ``Z`` and ``eps``: drawn from their priors."""
        pyro.sample("Z", self.domain.distribution(self.m))
        self.sample_eps()

    @pyro_method
    def model(self):
        # log p(y | X) = log N(y | c, K + s2 I): one Cholesky of the deep kernel matrix
        posterior = self.posterior()
        pyro.factor("data", posterior.log_marginal())
        # Z ~ p(Z): m collocation points where the equation holds           (..., m, d)
        Z = pyro.sample("Z", self.domain.distribution(self.m))
        # eps ~ N(0, 1): a posterior function draw f_eps = mu + eps sqrt(v)  (..., 1)
        eps = self.sample_eps()
        # h = psi[f_eps](Z): the draw pushed through the equation           (..., m)
        h = self.residual(posterior, Z, eps)
        # gamma log N(h | 0, kappa(Z, Z)): the unknown source g ~ GP(0, kappa) at Z
        pyro.factor("physics", self.gamma * self.physics_log_prob(h, Z))
        return posterior

    @pyro_method
    def guide(self):
        """Z and eps drawn from their priors (their log p - log q cancels exactly); the
        equation guide over Bayesian equation parameters, if any."""
        if self.equation_guide is not None:
            self.equation_guide()
        self.sample_physics_priors()

    @own_parameters
    def equation_posterior(self, num_samples=2000, seed=0, prob=0.9):
        r"""Posterior summary of the Bayesian equation parameters from the guide:
        ``{name: {"mean", "median", "lower", "upper"}}`` with the central ``prob`` interval
        (from ``num_samples`` draws of :math:`q(\theta)`)."""
        if not self.bayesian_sites:
            raise ValueError("No equation parameter has a prior; declare one with "
                             "Parameter(init, prior=...) to get a posterior")
        with torch.no_grad(), pyro.poutine.seed(rng_seed=seed):
            draws = [poutine.trace(self.equation_guide).get_trace() for _ in range(num_samples)]
        out = {}
        for site in self.bayesian_sites:
            v = torch.stack([tr.nodes[site]["value"] for tr in draws]).cpu()
            lo, hi = torch.quantile(v, torch.tensor([(1 - prob) / 2, (1 + prob) / 2],
                                                    dtype=v.dtype), dim=0)
            out[site.split(".", 1)[1]] = {"mean": v.mean(0).tolist(),
                                          "median": v.median(0).values.tolist(),
                                          "lower": lo.tolist(), "upper": hi.tolist()}
        return out

    def equation_parameters(self):
        """Current equation parameters as ``{name: float or list}`` (posterior medians of
        Bayesian ones)."""
        posterior = self.equation_posterior(num_samples=501) if self.bayesian_sites else {}
        with torch.no_grad():
            return {name: posterior[name]["median"] if name in posterior
                    else getattr(self.equation, name).detach().cpu().tolist()
                    for name in self.equation.parameter_names}
