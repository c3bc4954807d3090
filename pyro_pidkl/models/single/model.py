r"""A GP conditioned jointly on the data and on the equation at collocation points.

PI-DKL lets the equation reach the prediction only through the kernel's hyperparameters.
Here the equation is *data*: with the residual linearised around a function :math:`f_0`
(exact for a linear equation; for a nonlinear one :math:`f_0` is iterated to the posterior
mean by Gauss-Newton, as in Chen, Hosseini, Owhadi & Stuart 2021),

.. math::
    \psi[f](z) \approx b(z) + \sum_\alpha J_\alpha(z)\, \partial^\alpha f(z)
        =: b(z) + \mathcal{L} f(z),

the virtual observations :math:`v = \mathcal{L} f(Z) + \epsilon_r = g(Z) - b(Z)` at ``M``
collocation points :math:`Z` are jointly Gaussian with the data :math:`y`:

.. math::
    \begin{bmatrix} v \\ y \end{bmatrix} \sim
    \mathcal{N}\left(0, \begin{bmatrix}
      \mathcal{L}_z \mathcal{L}_{z'} k(Z, Z) + \Sigma_g + \tau\, \mathrm{diag} &
      \mathcal{L}_z k(Z, X) \\
      \mathcal{L}_{z'} k(X, Z) & K + \sigma^2 I \end{bmatrix}\right),

with the covariances of derivatives in closed form
(:class:`~pyro_pidkl.kernels.operators.OperatorCovariance`) and the joint factored once
(:class:`~pyro_pidkl.gp.joint.JointGaussian`). The residual noise is relative: its variance
at :math:`z_i` is :math:`\tau` times the prior variance of :math:`\mathcal{L} f(z_i)`, so
``residual_noise`` means the same for any equation and units. The source :math:`g` is a
modelling choice: ``"zero"`` (the equation as written is the physics), ``"gp"`` (an unknown
source, :math:`\Sigma_g = \rho^2 s_g^2 R(Z, Z)` with :math:`\rho^2` the mean prior
variance of :math:`\mathcal{L} f` and a learned amplitude), or a known function ``g(x)``.

Kernel, noise, source and the equation's unknown coefficients maximise

.. math::
    \log p(y \mid v) \quad (\text{the data under the GP conditioned on the equation}),

which does not change when the equation is multiplied by a coefficient-dependent constant
(``psi`` and ``psi / omega**2`` state the same equation), or, when the equation has no
unknown coefficient (a PDE solved from boundary data, say), the joint
:math:`\log p(v, y) = \log p(y \mid v) + \log p(v)`, whose second term lets the
collocation points inform the kernel too (``objective="auto"``). With unknown coefficients
:math:`\log p(v)` would reward coefficients that shrink the operator (on a wave equation it
drove the speed to ~0). On many data (above 2,000, ``data_likelihood="auto"``)
:math:`\log p(y \mid v)` is replaced by Titsias's collapsed variational bound on inducing
values at some of the data inputs (:class:`~pyro_pidkl.gp.inducing.InducingJoint`), whose
cost is linear in the data; :meth:`relinearise` adds inducing points while the bound's
trace term exceeds one nat.

A prediction is a pure function of the fitted model: it converges Gauss-Newton from the
stored linearisation point in local variables and never writes it;
:meth:`~PhysicsConditionedGP.relinearise` is the one method that moves it
(:func:`~pyro_pidkl.infer.fit` calls it).

This module holds the model's construction and its fit's settings; its parts, each in a
module of its own: the joint of data and equation (:mod:`~pyro_pidkl.models.single.joint`),
Gauss-Newton, the objective and the adequacy check (:mod:`~pyro_pidkl.models.conditioning.linearised`, shared
with :class:`~pyro_pidkl.models.ConditionedSystemGP`), priors and Laplace
(:mod:`~pyro_pidkl.models.conditioning.parameter_uncertainty`, shared too), and the prediction
(:mod:`~pyro_pidkl.models.single.prediction`).
"""

import itertools
import math

import numpy as np
import torch
from pyro.contrib.gp.kernels import RBF

from ...checks import distinct_inputs, equation_input_names, positive_int, warn
from ...physics.collocation import collocation_set, half_spacing
from ...physics.geometry import Shape
from ...physics.domain import Box
from ...physics.equation import Equation, claim
from ...physics.linearise import is_linear, linearise
from .inducing import INDUCING_START, InducingData
from .joint import EquationJoint
from .prior import DATA_FIT_POINTS, SinglePrior
from .subsets import Subsets
from .prediction import ConditionedPrediction
from ..pidkl.exact_gp import ExactGP
from ..conditioning.conditioned import ConditionedModel
from ..conditioning.counts import CountObservations, count_start
from ..conditioning.linearised import REFERENCE_LENGTHSCALES
from ..conditioning.parameter_uncertainty import with_point_priors
from ..conditioning.referee import equation_problem, referee
from ..conditioning.method_of_lines import lines_stage
from ..conditioning.resolution import between_residual, data_misfit, resolve
from ..conditioning.rows import FIT_COLLOCATION, CollocationRows
from ..parts import REFINE_DEFAULT, own_settings, take_parts

__all__ = ["PhysicsConditionedGP"]


#: a fit's starts are screened on at most this many data (a maximin subset); the best start
#: is then fitted to all of them
SCREEN_DATA_POINTS = 400

#: the model's own settings besides its parts, with their defaults
OWN_SETTINGS = {"objective": "auto", "newton_tol": 1e-6, "newton_max_iter": 30,
                "parameter_uncertainty": True, "feature_net": None}


class PhysicsConditionedGP(EquationJoint, Subsets, CollocationRows, InducingData, SinglePrior,
                           ConditionedPrediction, CountObservations, ConditionedModel, ExactGP):
    r"""A GP of :math:`f` conditioned on the data and on :math:`\psi[f](Z) = g(Z)`.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param equation: a :class:`~pyro_pidkl.physics.Equation` (derivatives up to order four
        with the SE kernel, two with the deep kernel),
        linear or not: linearity is decided by :func:`~pyro_pidkl.physics.is_linear`.
    :param input_names: names of the ``d`` inputs; required unless ``X`` has one column
        and the equation one input (pass them whenever in doubt).
    :param kernel: ``"se"`` (default: SE-ARD on the standardised inputs), ``"deep"`` (the
        paper's deep kernel: SE on MLP features) or a :mod:`pyro.contrib.gp` kernel of either
        kind.
    :param collocation: where the equation holds: a
        :class:`~pyro_pidkl.models.parts.collocation.Collocation` (points, design, seed, how
        many times a fit may double them while the equation fails between them, the subset a
        large fit learns on), a count (default ``200 d``) or an ``(M, d)`` tensor.
    :param domain: where the equation holds: a :class:`~pyro_pidkl.physics.domain.Box`
        (default: the data's box; give the whole domain to extrapolate) or a shape of
        :mod:`pyro_pidkl.physics.geometry` (a disk, a polygon, a difference, a product with a
        time interval: collocation inside it). Inputs are standardised by the domain's
        bounding box, not by the data alone.
    :param source: :math:`g`: a part of :mod:`~pyro_pidkl.models.parts.sources`
        (``ZeroSource()``, ``KnownSource(g)``, ``GPSource(inputs, variance, prior)``), or
        ``"zero"`` (default), ``"gp"``, a callable ``g(x) -> (M,)`` on an
        :class:`~pyro_pidkl.physics.derivatives.Inputs` (``x["t"]``) in user units.
    :param likelihood: :class:`~pyro_pidkl.models.parts.likelihoods.GaussianNoise` (noise
        relative to the kernel's variance: where a learned one starts, default ``1e-2``, or
        its value held; its floor, default ``1e-10``, so that exact data, boundary values,
        are fitted exactly; learned from ten data on by default), or counts
        (:class:`~pyro_pidkl.models.parts.likelihoods.Poisson`,
        :class:`~pyro_pidkl.models.parts.likelihoods.NegativeBinomial`: :math:`f` the log of
        their mean) or positive data with multiplicative noise
        (:class:`~pyro_pidkl.models.parts.likelihoods.LogNormalNoise`), conditioned on
        through a working response (:mod:`~pyro_pidkl.models.conditioning.counts`; the
        kernel's variance then learned, not profiled).
    :param conditions: boundary and initial conditions, each a
        :class:`~pyro_pidkl.physics.Condition` (an operator, its points and values: Dirichlet,
        Neumann, Robin, an initial rate), conditioned on like the equation, always with all
        their points.
    :param solver: ``"auto"`` (default: Titsias's bound above
        :data:`~pyro_pidkl.models.single.inducing.INDUCING_DATA` data, else dense),
        :class:`~pyro_pidkl.models.parts.solvers.Dense` or
        :class:`~pyro_pidkl.models.parts.solvers.Inducing` (``count``, or ``"auto"``: from
        :data:`INDUCING_START`, doubled by :meth:`relinearise` while the bound is loose).
    :param dict priors: priors on the GP's own parameters, ``{name: distribution}`` in the
        model's units (:meth:`hyperparameters` names them: ``"kernel.lengthscale"`` on the
        inputs scaled to the domain, ``"noise"`` relative to the signal's variance); they
        enter the objective (a MAP fit) and the densities that
        :func:`~pyro_pidkl.infer.nuts.sample_coefficients` draws from. Without one, a
        parameter's prior is flat on its unconstrained scale (the log of a lengthscale).
    :param settings: ``residual_noise`` (:math:`\tau`, a number or a
        :class:`~pyro_pidkl.models.parts.residual.ResidualNoise`, default ``1e-6``);
        ``objective`` (``"auto"``: ``"conditional"``, :math:`\log p(y \mid v)`, when the
        equation has unknown coefficients, else ``"joint"``, :math:`\log p(v, y)`);
        ``newton_tol``, ``newton_max_iter`` (Gauss-Newton's relative tolerance on the
        linearisation point, and its iterations); ``parameter_uncertainty`` (default
        ``True``: predictions carry the Laplace uncertainty of the coefficients and of the
        GP's identified parameters, :func:`~pyro_pidkl.infer.sigma_points.sigma_points`, once
        fitted); ``feature_net`` (the feature map of ``kernel="deep"``); those of
        :class:`~pyro_pidkl.models.pidkl.exact_gp.ExactGP`; and the older keywords of each
        part's fields (``design``, ``seed``, ``collocation_refine``, ``fit_collocation``;
        ``noise``, ``noise_floor``, ``learn_noise``; ``source_inputs``, ``source_variance``,
        ``source_prior``; ``learn_residual_noise``, ``residual_noise_floor``;
        ``data_likelihood``, ``inducing``: :mod:`~pyro_pidkl.models.parts.settings`).

    Sites of :meth:`model`: the ``data`` factor, :math:`\log p(y \mid v)` (or
    :math:`\log p(v, y)` with the joint objective), profiled over the kernel's variance
    (plus the source amplitude's log prior with ``source_prior``).
    """

    #: every covariance is relative to the kernel's variance: the objective profiles it out
    profile_scale = True
    #: one value may pin an equation's solution (an initial value), and a constant boundary
    #: value is common in solver mode: neither is refused nor warned of
    min_training_points = 1
    warn_constant_y = False
    #: :func:`~pyro_pidkl.infer.fit` screens its starts on at most this many data
    #: (:meth:`data_subset`; ``None``: all of them)
    screen_data = SCREEN_DATA_POINTS

    def __init__(self, X, y, equation, input_names=None, kernel="se", collocation=None,
                 domain=None, source="zero", likelihood=None, conditions=(), solver="auto",
                 priors=None, **settings):
        parts = take_parts(settings, collocation, likelihood, source, solver)
        kind = parts.likelihood.kind
        noise, noise_floor = (parts.likelihood.noise, parts.likelihood.floor) if \
            kind == "gaussian" else (None, None)
        noise_floor = 1e-10 if noise_floor is None else noise_floor
        if kind != "gaussian":      # what the prior and the first fits see: log(y + 1/2)
            y = count_start(kind, torch.as_tensor(np.asarray(y, dtype=np.float64)).reshape(-1),
                            "y")
        options = own_settings(settings, OWN_SETTINGS)
        if not isinstance(equation, Equation):
            raise TypeError(f"Expected equation to be a pyro_pidkl.physics.Equation; got "
                            f"{type(equation).__name__}")
        equation = with_point_priors(claim(equation, self))
        input_names = equation_input_names(X, input_names, equation)
        super().__init__(X, y, input_names, noise=1e-2 if noise is None else noise,
                         noise_floor=noise_floor, **settings)
        self.parts = parts
        self._set_likelihood(parts.likelihood, noise, noise_floor)
        equation.check_inputs(self.input_names)
        self.equation = equation
        self.shape = None
        if isinstance(domain, Shape):
            if tuple(domain.inputs) != tuple(self.input_names):
                raise ValueError(f"Expected the domain's inputs {tuple(domain.inputs)} to be the "
                                 f"model's, in order: {tuple(self.input_names)}")
            self.shape, domain = domain, domain.box()
        self.domain = (domain or Box()).resolve(self.X, self.input_names)
        if not hasattr(self.domain, "low"):
            raise TypeError(f"Expected domain to be a Box or a shape of "
                            f"pyro_pidkl.physics.geometry; got {type(domain).__name__}")
        self._standardise_on_domain(settings.get("standardize", True))
        self.kernel = self._make_kernel(kernel, options["feature_net"])
        design, seed = parts.collocation.design, parts.collocation.seed
        Z = collocation_set(parts.collocation.points, self.domain, self.input_names, design,
                            seed, self.X.dtype, self.shape).to(self.X)
        Z = self._with_conditions(Z, conditions)
        self.register_buffer("Z", Z)
        self.register_buffer("Z_s", self.standardizer.x_to_model(Z))
        self._set_residual_noise(parts.residual)
        self._set_source(parts.source)
        learned = self._learned()
        if learned and self.X.shape[0] > 1 and distinct_inputs(self.X) == 1:
            warn(f"Every datum of {self._what()} is at one input ({self.X[0].tolist()}): the "
                 f"data pin the function's value there, not the coefficients "
                 f"{', '.join(learned)} (measure where the dynamics act)")
        objective = options["objective"]
        if objective == "auto":
            # the joint density only where the virtual observations carry a known source:
            # with learned coefficients it rewards shrinking the operator, and with no
            # source (v = 0) it rewards a kernel whose operator covariance collapses (a
            # Laplace equation's lengthscales ran to 1e73)
            objective = "joint" if not learned and self.source_kind == "known" else \
                "conditional"
        if objective not in ("conditional", "joint"):
            raise ValueError(f"Expected objective to be 'auto', 'conditional' or 'joint'; got "
                             f"{objective!r}")
        self.objective = objective
        self._set_newton(options["newton_tol"], options["newton_max_iter"])
        self.parameter_uncertainty = bool(options["parameter_uncertainty"])
        fit_collocation = parts.collocation.subset(FIT_COLLOCATION)
        self.fit_collocation = (None if fit_collocation is None else
                                positive_int(fit_collocation, "fit_collocation"))
        self.data_likelihood, inducing = parts.solver
        if self.count_outputs:              # their working response's variance is per datum
            if self.data_likelihood == "inducing":
                raise ValueError(f"Expected a dense solver with a {kind!r} likelihood (the "
                                 f"inducing-point bound takes one noise for all data); got "
                                 f"{solver!r}")
            self.data_likelihood = "exact"
        self.collocation_refine = parts.collocation.refinements(REFINE_DEFAULT)
        self.inducing_auto = inducing == "auto"
        count = INDUCING_START if self.inducing_auto else positive_int(inducing, "inducing")
        self.register_buffer("inducing_count", torch.tensor(count))
        # which derivatives psi reads, and whether it is linear (at random jets, not at 0)
        indices, self.linear = set(), True
        for start, stop, eq, _ in self._blocks():
            probe = self.Z[start:stop][:: max(1, (stop - start) // 16)][:16]
            for jet in ({}, {(): torch.randn(probe.shape[0], dtype=self.X.dtype,
                                             generator=torch.Generator().manual_seed(seed))}):
                indices |= set(linearise(eq, jet, probe, self.input_names).coefficients)
            self.linear = self.linear and is_linear(eq, probe, self.input_names, seed=seed)
        # counts: the working response moves with the fit (Fisher scoring beside Gauss-Newton)
        self.linear = self.linear and not self.count_outputs
        self.indices = sorted(indices, key=lambda i: (len(i), i))
        self._warn_unused_coefficients(seed)
        top = 4 if isinstance(self.kernel, RBF) else 2
        if any(len(i) > top for i in self.indices):
            raise ValueError(f"Equation {equation.name!r} or a condition reads a derivative of "
                             f"order above {top}; PhysicsConditionedGP supports orders up to "
                             f"{top} with {'the SE' if top == 4 else 'a deep'} kernel")
        # the linearisation point f0: the jet of the posterior mean at Z, in user units, one
        # row per derivative in self.indices
        self.register_buffer("f0", torch.zeros(len(self.indices), self.Z.shape[0],
                                               dtype=self.X.dtype))
        # until the first relinearise(), Gauss-Newton starts from the data-only GP's mean
        self.register_buffer("f0_set", torch.tensor(False))
        #: set by pyro_pidkl.fit: the Laplace approximation is taken at a fitted optimum only
        self.register_buffer("fitted", torch.tensor(False))
        self._cache = None
        priors = dict(priors or {})
        if self.source_kind == "gp" and self.source_prior is not None:  # among the rest
            priors.setdefault("source_kernel.variance", self.source_prior)
        self._set_priors(priors)
        self._check_right_hand_sides()
        self._hint_state_space()

    def parameter_bounds(self):
        r"""Bounds of the fit on unconstrained parameters: an SE kernel's lengthscales stay
        above half the spacing of the points (data and collocation) in each input,
        :math:`\tfrac12 \sqrt{12} / n^{1/d}` in standardised units. Below it the kernel
        sees each point alone, a degenerate optimum of the marginal likelihood (the
        derivative covariances grow as :math:`l^{-4}` and every point becomes its own
        observation)."""
        out = self._held_coefficient_bounds()        # the referee holds them
        kern = getattr(self.kernel, "kern", self.kernel)
        if getattr(self.kernel, "kern", None) is not None or not hasattr(kern, "lengthscale"):
            return out
        low = half_spacing(self.X_s.shape[0] + self.Z_s.shape[0], self.input_dim)
        out[kern.lengthscale_unconstrained] = (math.log(low), None)
        return out

    #: after a fit: the collocation refined while the equation fails between its points
    #: (:func:`~pyro_pidkl.models.conditioning.resolution.resolve`), then an explicit ODE
    #: refereed on its exact likelihood (:func:`~pyro_pidkl.models.conditioning.referee.referee`),
    #: an evolution PDE in one space input checked by the method of lines
    #: (:func:`~pyro_pidkl.models.conditioning.method_of_lines.lines_stage`)
    after_fit_stages = (("refine", resolve), ("referee", referee), ("lines", lines_stage))

    def _between_residual(self, joint):
        return between_residual(self, joint)

    def _data_misfit(self):
        return data_misfit(self)

    def _exact_problem(self):
        return equation_problem(self)

    # -- construction helpers ----------------------------------------------------------
    @property
    def starts(self):
        """The fit's starts: each candidate set of source inputs (``source_inputs="auto"``;
        else the one set) with the learned coefficients as given and moved by a factor of
        three either way (``log 3`` in their unconstrained space): the marginal likelihood
        in the coefficients has several optima, and from half the truth a first-order
        ODE's decay rate ran to zero."""
        shifts = [0.0, math.log(3.0), -math.log(3.0)] if self._learned() else [0.0]
        return list(itertools.product(range(len(self.source_candidates)), shifts))

    def _coefficients(self):
        """``[(name, owner, parameter), ...]`` of every learned coefficient: the equation's
        by their names, a condition's as ``"condition name.parameter"``."""
        out = [(n, self.equation, n) for n, spec in self.equation.specs.items()
               if not spec.fixed]
        for c, eq in zip(self.conditions, self.condition_equations):
            out += [(f"{c.name}.{n}", eq, n) for n, spec in eq.specs.items() if not spec.fixed]
        return out

    def _begin_start(self, r, start):
        """Start ``r``'s candidate set of source inputs; returns its coefficients' move."""
        candidate, shift = start
        cols = self.source_candidates[candidate]
        if cols is not None:
            mask = torch.zeros_like(self.source_mask)
            mask[list(cols)] = 1.0
            with torch.no_grad():
                self.source_mask.copy_(mask)
        return shift

    # -- adequacy (LinearisedConditioning.adequacy) ---------------------------------------
    def _log_evidence_ratio(self):
        r""":math:`\log p(y \mid v) - \log p(y)`: the fit's data density given the
        equation (profiled over the kernel's variance) against the best SE-ARD GP of the
        data alone (:func:`~pyro_pidkl.gp.data_fit.fit_data_only`, several starts), on a
        maximin subset of at most :data:`DATA_FIT_POINTS` data."""
        from ...gp.data_fit import fit_data_only
        if self.count_outputs:               # counts: no Gaussian reference
            return math.nan
        with self.data_subset(DATA_FIT_POINTS):
            if self.X_s.shape[0] < 3:
                return math.nan
            conditional = float(self.solve()[0].log_prob_data_given_virtual(profile=True))
            alone = fit_data_only(self.X_s, (self.y_s - self.prior_mean()).detach(),
                                  self.noise_floor, lengthscale=REFERENCE_LENGTHSCALES)
        return math.nan if alone is None else conditional - alone.log_likelihood

    # -- what messages and reports name -------------------------------------------------
    def _what(self):
        return f"equation {self.equation.name!r}"

    def equation_parameters(self):
        """Current equation parameters as ``{name: float or list}``."""
        with torch.no_grad():
            out = {name: getattr(self.equation, name).detach().cpu().tolist()
                   for name in self.equation.parameter_names}
            for name, owner, p in self._coefficients():
                if owner is not self.equation:
                    out[name] = getattr(owner, p).detach().cpu().tolist()
            return out

    # -- Laplace (ParameterUncertainty) ------------------------------------------------
    def _nuisance_parameters(self):
        """The GP's own scalar parameters (kernel lengthscales, noise, source; not a feature
        net, not the profiled kernel variance, which has no curvature of its own; a count
        likelihood's dispersion and the kernel's variance, learned then)."""
        kern = getattr(self.kernel, "kern", self.kernel)
        profiled = kern.variance_unconstrained if self.profile_scale else None
        return [p for name, p in self.named_parameters()
                if not name.startswith(("equation.", "condition_equations."))
                and "iwarping_fn" not in name and p.requires_grad and p is not profiled]
