r"""The PI-DKL physics term: a part that any GP model of the library carries.

For an equation :math:`\psi[f] = g` whose source :math:`g \sim GP(0, \kappa)` is unknown, a
posterior function draw :math:`f_\epsilon` of the model is pushed through :math:`\psi` at
random collocation points :math:`Z \sim p(Z)`, and the model's objective gains

.. math::
    \gamma\, \mathbb{E}_{p(Z)} \mathbb{E}_{p(\epsilon)}
    \log \mathcal{N}\big(h(Z, \epsilon) \mid 0, \kappa(Z, Z)\big),
    \qquad h(Z, \epsilon) = \psi[f_\epsilon](Z).

In Pyro: two sample sites (``Z``, ``eps``) whose guide is their prior, and one factor site
(``physics``). A model calls :meth:`PhysicsTerm.factor` in its ``model()`` with its own
posterior draw, and :meth:`PhysicsTerm.guide` in its ``guide()``:

.. code-block:: python

    term = PhysicsTerm(physics.heat_1d(alpha=0.5), gamma=1.0)
    pi_skl = SKL(X, y, input_names=("x", "t"), physics=term)       # PI-SKL
"""

import math

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_median, init_to_value
from pyro.nn import PyroModule, PyroParam
from torch.distributions import constraints

from ..checks import positive_int
from ..errors import NonFiniteError
from ..gp.posterior import factorise, logdet, quad_diag
from ..kernels.deep import feature_map
from ..kernels.features import smoothness_order
from ..kernels.se import se_ard, se_gram
from ..param_scope import own_parameters
from .condition import Condition
from .derivatives import Inputs
from .domain import Box
from .equation import Equation, claim, source_columns

__all__ = ["PhysicsTerm"]

#: how the draw's noise :math:`\epsilon` is shared: one per function draw (the paper), one per
#: collocation point (the paper's public code), or none (the posterior mean)
DRAWS = ("function", "pointwise", "mean")


def physics_weight(gamma):
    r"""``gamma`` as a float, checked: a finite number :math:`\ge 0`."""
    try:
        gamma = float(gamma)
    except (TypeError, ValueError):
        raise TypeError(f"Expected gamma to be a number; got {gamma!r}") from None
    if not (gamma >= 0 and math.isfinite(gamma)):
        raise ValueError(f"Expected gamma >= 0 (finite); got {gamma}")
    return gamma


def source_gram(kernel, standardizer, cols, Z, jitter):
    r""":math:`\kappa(Z, Z) + j s^2 I` ``(..., m, m)`` of an SE-ARD source ``kernel`` (variance
    :math:`s^2`) on the inputs ``Z`` ``(..., m, d)`` (user units) standardised by
    ``standardizer`` and restricted to the columns ``cols`` (``None``: all), ``j`` the relative
    nugget ``jitter`` (:func:`~pyro_pidkl.kernels.se_gram`: its backward written out)."""
    U = standardizer.x_to_model(Z)
    if cols is not None:
        U = U.index_select(-1, cols)
    s2 = kernel.variance
    return se_gram(U / kernel.lengthscale, s2, jitter * s2)


def gaussian_log_prob(h, Sigma):
    r""":math:`\log \mathcal{N}(h \mid 0, \Sigma)` for ``h`` ``(..., m)`` and ``Sigma``
    ``(..., m, m)``: the quadratic form and :math:`\log|\Sigma|` with closed-form gradients,
    as the data term's (a jitter up to ``1e-1`` relative where the factorisation needs it)."""
    m = Sigma.shape[-1]
    Sigma, L, Sinv = factorise(Sigma, 1e-6, 1e-1, what=f"{m} x {m} source kernel matrix")
    quad = quad_diag(Sigma, h.unsqueeze(-1), L, Sinv).squeeze(-1)     # h' Sigma^-1 h
    return -0.5 * quad - 0.5 * logdet(Sigma, L, Sinv) - 0.5 * m * math.log(2 * math.pi)


class PhysicsTerm(PyroModule):
    r"""The weighted physics factor of PI-DKL (module docstring), for any GP model.

    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param float gamma: weight :math:`\gamma \ge 0`.
    :param int m: number of collocation points :math:`Z` per draw.
    :param domain: :math:`p(Z)`: a :class:`~pyro_pidkl.physics.Box` (default: the box of the
        model's training inputs) or :class:`~pyro_pidkl.physics.Gaussian`, in user units.
    :param source_inputs: inputs of the source kernel :math:`\kappa`: ``"equation"``
        (default, those the equation differentiates), ``"all"``, or a tuple of names.
    :param str draw: what is pushed through :math:`\psi`: ``"function"`` (the paper: one
        :math:`\epsilon \sim \mathcal{N}(0, 1)` per function draw
        :math:`f_\epsilon = \mu + \epsilon\sqrt{v}`), ``"pointwise"`` (one :math:`\epsilon`
        per collocation point, as the paper's public code) or ``"mean"`` (the posterior mean
        :math:`\mu`; no ``eps`` site).
    :param float source_jitter: relative nugget added to :math:`\kappa(Z, Z)`.
    :param equation_guide: a guide over the equation's Bayesian parameters (those declared
        with a prior); default an :class:`~pyro.infer.autoguide.AutoNormal` started at their
        initial values.
    :param conditions: boundary and initial conditions (:class:`~pyro_pidkl.physics.Condition`,
        periodic ones included; their own coefficients learned as point estimates and
        reported as ``"name.k"``): each adds
        :math:`\gamma \log \mathcal{N}(\mathcal{B}[f_\epsilon](X_c) - h_c \mid 0,
        s_c^2 I)` at its own points (site ``conditions``), :math:`s_c^2` its
        ``residual_noise`` in the user's units squared when given, else learned (from
        :math:`(0.1 s_y)^2`, above :math:`(10^{-4} s_y)^2`, :math:`s_y` the data's scale).

    Sites (``S`` particles when vectorised): ``Z`` ``(S, m, d)``, ``eps`` ``(S, 1)`` or
    ``(S, m)``, factor ``physics`` ``(S,)``; a Bayesian equation parameter ``B`` is the sample
    site ``physics.equation.B``.
    """

    def __init__(self, equation, gamma=1.0, m=10, domain=None, source_inputs="equation",
                 draw="function", source_jitter=1e-6, equation_guide=None, conditions=()):
        super().__init__()
        if not isinstance(equation, Equation):
            raise TypeError(f"Expected equation to be a pyro_pidkl.physics.Equation; got "
                            f"{type(equation).__name__}")
        gamma = physics_weight(gamma)
        if draw not in DRAWS:
            raise ValueError(f"Expected draw to be one of {DRAWS}; got {draw!r}")
        self.equation = claim(equation, self)
        self.gamma, self.m = gamma, positive_int(m, "m (number of collocation points)")
        self.draw, self.source_jitter = draw, float(source_jitter)
        self._domain, self._source_inputs = domain, source_inputs
        self._equation_guide = equation_guide
        self.conditions = list(conditions or ())
        for c in self.conditions:
            if not isinstance(c, Condition):
                raise TypeError(f"Expected conditions to be pyro_pidkl.physics.Condition "
                                f"objects; got {type(c).__name__}")
            if isinstance(c.operator, Equation) and any(
                    spec.prior is not None for spec in c.operator.specs.values()):
                raise ValueError(f"Expected the parameters of condition {c.name!r} without a "
                                 f"prior (they are learned as point estimates)")
        self.input_names = None   # set by attach()
        self._plan = None         # the derivatives psi asked for last time

    # -- binding to a model --------------------------------------------------------------
    def attach(self, gp):
        """Bind the term to the model ``gp`` that carries it (as ``gp.physics``): its inputs,
        the box of its training inputs (the default domain), its standardisation (the source
        kernel acts on standardised inputs), and how often its kernel can be differentiated.
        Runs the equation once on a smooth function of the kernel, so that a bad equation
        fails here rather than after minutes of training."""
        names = gp.input_names
        self.equation.check_inputs(names)
        self.input_names = names
        self.domain = (self._domain or Box()).resolve(gp.X, names)
        cols = source_columns(self._source_inputs, self.equation, names)
        self.source_kernel = se_ard(len(names), cols, dtype=gp.X.dtype).to(gp.X.device)
        # the columns kappa reads (None: all of them, in order)
        self.register_buffer("_source_cols", None if list(cols) == list(range(len(names)))
                             else torch.tensor(cols, device=gp.X.device), persistent=False)
        self._units = (gp.standardizer,)   # a tuple: the model owns the module
        net = feature_map(gp.kernel)
        self.max_order = smoothness_order(net) if net is not None else math.inf
        self.why = (f" because the feature map {type(net).__name__} has a piecewise-linear or "
                    "C1 activation (ReLU-like: autograd returns 0 for its second derivatives); "
                    "use a smooth activation such as nn.Tanh or nn.SiLU"
                    if math.isfinite(self.max_order) else "")
        self._probe(gp)
        self._attach_conditions(gp)
        self.bayesian_sites = tuple(f"{self.equation._pyro_name}.{n}"
                                    for n, spec in self.equation.specs.items()
                                    if spec.prior is not None and not spec.fixed)
        guide = self._equation_guide
        if guide is None and self.bayesian_sites:
            init = {f"{self.equation._pyro_name}.{n}": spec.init.to(gp.X.dtype)
                    for n, spec in self.equation.specs.items() if spec.prior is not None}
            guide = AutoNormal(poutine.block(gp.model, expose=self.bayesian_sites),
                               init_loc_fn=init_to_value(values=init, fallback=init_to_median),
                               init_scale=0.05)
        self.equation_guide = guide
        return self

    def _attach_conditions(self, gp):
        equations = [c.bind(gp.input_names, self.equation.inputs) for c in self.conditions]
        if not self.conditions:
            self._condition_equations = []
            return
        # a module list: a condition's own coefficients (a Robin k) are learned with the rest
        self._condition_equations = PyroModule[torch.nn.ModuleList](equations)
        scale = float(gp.standardizer.y_scale)
        given = [c.residual_noise for c in self.conditions]
        self.register_buffer("_condition_given", torch.tensor(
            [-1.0 if v is None else float(v) for v in given], dtype=gp.X.dtype))
        self.condition_noise = PyroParam(
            torch.full((len(given),), (0.1 * scale) ** 2, dtype=gp.X.dtype),
            constraints.greater_than((1e-4 * scale) ** 2))

    def condition_factor(self, draw, eps):
        r"""The ``conditions`` factor: :math:`\gamma \sum_c \log \mathcal{N}(\mathcal{B}_c
        [f_\epsilon](X_c) - h_c \mid 0, s_c^2 I)` for the draw ``draw(eps)`` (the equation's
        first :math:`\epsilon`); nothing without conditions."""
        if not self.conditions:
            return
        like = self._units[0].x_loc
        batch = eps.shape[:-1]
        noise = torch.where(self._condition_given > 0, self._condition_given,
                            self.condition_noise)
        total = 0.0
        for k, (c, eq) in enumerate(zip(self.conditions, self._condition_equations)):
            pts = c.points.to(like)
            if c.pair is not None:
                pts = torch.cat([pts, c.pair.to(like)])
            K = pts.shape[0]
            P = pts.expand(*batch, K, pts.shape[-1])
            f = draw(eps[..., :1].expand(*batch, K).reshape(-1))
            h = eq.residual(f, P.reshape(-1, pts.shape[-1]), self.input_names, self.max_order,
                            self.why).reshape(*batch, K)
            if c.pair is not None:
                r = h[..., :K // 2] - h[..., K // 2:]
            else:
                r = h - c.values(Inputs(c.points.to(like), self.input_names)).to(like)
            n = r.shape[-1]
            total = total - 0.5 * (r.pow(2).sum(-1) / noise[k] + n * torch.log(
                2 * math.pi * noise[k]))
        pyro.factor("conditions", self.gamma * total)

    @own_parameters
    def _probe(self, gp):
        st = gp.standardizer
        U0 = gp.X_s[:3]

        def smooth(x):   # k(x, X[:3]) 1: as smooth as the model's functions
            return gp.kernel(st.x_to_model(x), U0).sum(-1)
        with poutine.block():
            _, field = self.equation.residual_field(smooth, gp.X[:2], self.input_names,
                                                    self.max_order, self.why)
        self._plan = frozenset(field.requested)

    def _apply(self, fn, *args, **kwargs):
        # model.to(device) / .double(): the domain's tensors follow the module's
        out = super()._apply(fn, *args, **kwargs)
        if hasattr(self, "domain"):
            self.domain = self.domain.apply(fn)
        return out

    # -- the pieces of the factor ----------------------------------------------------------
    def sample_Z(self):
        r""":math:`Z \sim p(Z)`: the ``Z`` site ``(..., m, d)``."""
        return pyro.sample("Z", self.domain.distribution(self.m))

    def sample_eps(self):
        r""":math:`\epsilon \sim \mathcal{N}(0, 1)`: the ``eps`` site, ``(..., 1)`` per
        function draw or ``(..., m)`` per point; with ``draw="mean"`` a zero and no site."""
        like = self._units[0].x_loc
        if self.draw == "mean":
            return torch.zeros(1, dtype=like.dtype, device=like.device)
        size = 1 if self.draw == "function" else self.m
        zero = torch.zeros(size, dtype=like.dtype, device=like.device)
        return pyro.sample("eps", dist.Normal(zero, 1.0, validate_args=False).to_event(1))

    def residual(self, draw, Z, eps):
        r""":math:`h(Z, \epsilon) = \psi[f_\epsilon](Z)`, shape ``Z.shape[:-1]``.

        :param callable draw: ``draw(eps (M,))`` is the model's posterior function draw
            :math:`f_\epsilon`, a function of user-unit points ``(M, d) -> (M,)``.
        """
        batch, d = Z.shape[:-1], Z.shape[-1]
        f = draw(eps.expand(batch).reshape(-1))
        h, field = self.equation.residual_field(f, Z.reshape(-1, d), self.input_names,
                                                self.max_order, self.why, plan=self._plan)
        self._plan = frozenset(field.requested)
        return h.reshape(batch)

    def source_covariance(self, Z):
        r""":math:`\kappa(Z, Z)` plus its relative nugget, ``(..., m, m)`` for ``Z``
        ``(..., m, d)`` (user units): the SE-ARD source kernel on the standardised inputs it
        uses (:func:`~pyro_pidkl.kernels.se_gram`: its backward written out)."""
        return source_gram(self.source_kernel, self._units[0], self._source_cols, Z,
                           self.source_jitter)

    def log_prob(self, h, Z):
        r""":math:`\log \mathcal{N}(h \mid 0, \kappa(Z, Z))`, reduced over the ``m`` points."""
        if not torch.isfinite(h).all():
            bad = int((~torch.isfinite(h)).sum())
            raise NonFiniteError(
                f"The residual of equation {self.equation.name!r} is NaN/inf at {bad} of "
                f"{h.numel()} collocation points (parameters: {self.equation_parameters()})")
        return gaussian_log_prob(h, self.source_covariance(Z))

    # -- model and guide ---------------------------------------------------------------------
    def factor(self, draw):
        r"""The ``Z`` and ``eps`` sites and the ``physics`` factor for the model's posterior
        draw ``draw(eps) -> f_eps`` (see :meth:`residual`)."""
        # Z ~ p(Z): m collocation points where the equation holds           (..., m, d)
        Z = self.sample_Z()
        # eps ~ N(0, 1): which posterior function draw f_eps = mu + eps sqrt(v)  (..., 1)
        eps = self.sample_eps()
        # h = psi[f_eps](Z): the draw pushed through the equation           (..., m)
        h = self.residual(draw, Z, eps)
        # gamma log N(h | 0, kappa(Z, Z)): the unknown source g ~ GP(0, kappa) at Z
        pyro.factor("physics", self.gamma * self.log_prob(h, Z))
        self.condition_factor(draw, eps)

    def guide(self):
        """``Z`` and ``eps`` drawn from their priors (their log p - log q cancels exactly),
        then the equation guide over Bayesian equation parameters, if any."""
        self.sample_Z()
        self.sample_eps()
        if self.equation_guide is not None:
            self.equation_guide()

    # -- the equation's parameters -------------------------------------------------------------
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
            out[site.rsplit(".", 1)[1]] = {"mean": v.mean(0).tolist(),
                                           "median": v.median(0).values.tolist(),
                                           "lower": lo.tolist(), "upper": hi.tolist()}
        return out

    def equation_parameters(self):
        """Current equation parameters as ``{name: float or list}`` (posterior medians of
        Bayesian ones)."""
        posterior = self.equation_posterior(num_samples=501) if self.bayesian_sites else {}
        with torch.no_grad():
            out = {name: posterior[name]["median"] if name in posterior
                   else getattr(self.equation, name).detach().cpu().tolist()
                   for name in self.equation.parameter_names}
            for c, eq in zip(self.conditions, self._condition_equations):
                out.update({f"{c.name}.{n}": getattr(eq, n).detach().cpu().tolist()
                            for n, spec in eq.specs.items() if not spec.fixed})
            return out

    def extra_repr(self):
        return f"gamma={self.gamma}, m={self.m}, draw={self.draw!r}"
