r"""Several unknown functions conditioned jointly on their data and on a system of equations.

Each output :math:`f_c` (:math:`c = 1..C`) has its own GP prior, independent a priori,

.. math:: f_c = \mu_c + s_{y,c}\,(m_c + g_c(u)), \qquad g_c \sim GP(0, k_c),

(:math:`u` the inputs standardised by the domain, :math:`\mu_c, s_{y,c}` the output's
standardisation, :math:`m_c` a learned constant, :math:`k_c` SE-ARD). The system
:math:`\psi_e[f_1..f_C] = 0` (:class:`~pyro_pidkl.physics.EquationSystem`), linearised
around the jets of the current posterior means (exact for a linear system; Gauss-Newton for
a nonlinear one, as in :class:`~pyro_pidkl.models.PhysicsConditionedGP`),

.. math::
    \psi_e[f](z) \approx b_e(z) + \sum_{c,\alpha} w_{e,c,\alpha}(z)\,\partial^\alpha g_c(z),

gives ``E`` virtual observations at each of ``M`` collocation points, jointly Gaussian with
each output's data (:mod:`~pyro_pidkl.models.system.joint`); because the outputs are
independent a priori, their covariances are sums over outputs, and an output that is never
observed is still determined, with an interval, through the
equations that couple it to the others. Kernels, means, noises and the system's unknown
coefficients maximise :math:`\log p(y \mid v)` (or :math:`\log p(v, y)`,
``objective="joint"``) with L-BFGS (:func:`~pyro_pidkl.infer.fit`); Laplace intervals for
the coefficients come from :func:`~pyro_pidkl.infer.laplace.coefficient_intervals`, and
predictions carry them as the single-output model's do
(:mod:`~pyro_pidkl.models.conditioning.parameter_uncertainty`). The fit starts from gradient matching and,
for an explicit ODE, shooting (:mod:`~pyro_pidkl.models.system.matching`), and keeps its best
stage (:mod:`~pyro_pidkl.models.conditioning.stages`).
"""

import math

import torch
from pyro.nn import PyroModule

from ...checks import positive_int, warn
from ...gp.data_fit import fit_data_only
from ...physics.collocation import collocation_set
from ...physics.domain import Box
from ...physics.equation import claim
from ...physics.linearise import unused_coefficients
from ...physics.observations import split_by_output
from ...physics.ode import explicit_ode
from ...physics.system import EquationSystem, is_linear_system, linearise_system
from ..conditioning.conditioned import ConditionedModel
from ..conditioning.counts import CountObservations, output_likelihoods
from ..conditioning.linearised import REFERENCE_LENGTHSCALES
from ..conditioning.parameter_uncertainty import with_point_priors
from ..conditioning.referee import referee, system_problem
from ..conditioning.resolution import resolve
from ..conditioning.rows import FIT_COLLOCATION, CollocationRows
from ..conditioning.stages import keep_best_stage
from ..conditioning.starts import default_starts
from ..parts import REFINE_DEFAULT, own_settings, take_parts
from .conditions import SystemConditions
from .joint import SystemJoint
from .matching import TrajectoryMatching
from .prediction import SystemPrediction
from .prior import SystemPrior
from .sources import SystemSources

__all__ = ["ConditionedSystemGP"]

#: the model's own settings besides its parts, with their defaults
OWN_SETTINGS = {"objective": "conditional", "newton_tol": 1e-6, "newton_max_iter": 30,
                "parameter_uncertainty": True, "dtype": torch.float64}


class ConditionedSystemGP(SystemJoint, SystemPrior, SystemPrediction, SystemConditions,
                          SystemSources, TrajectoryMatching, CollocationRows, CountObservations,
                          ConditionedModel, PyroModule):
    r"""GPs of a system's outputs conditioned on their data and on the system (module
    docstring).

    :param system: an :class:`~pyro_pidkl.physics.EquationSystem`.
    :param data: ``{output: (X_c, y_c)}`` (each output at its own inputs; outputs left out
        are never observed) or ``(X, Y)`` with ``Y`` ``(N, C)`` and ``NaN`` where not
        observed (:func:`~pyro_pidkl.physics.observations.split_by_output`).
    :param input_names: the names of the input columns (default: the system's ``inputs``).
    :param domain: a :class:`~pyro_pidkl.physics.Box` where the system holds (default: the
        data's box; give the whole interval to predict beyond the data).
    :param collocation: a :class:`~pyro_pidkl.models.parts.collocation.Collocation`
        (points, design, seed, how many times a fit may double them while an equation fails
        between them, the subset a large fit learns on: default 600 of them), a count
        (default ``200 d``) or an ``(M, d)`` tensor; every equation holds at each point.
    :param likelihoods: how each output's data arise: one part of
        :mod:`~pyro_pidkl.models.parts.likelihoods` for every output, or ``{output: part}``
        (names accepted: ``"poisson"``, ``"negative_binomial"``), the others
        :class:`~pyro_pidkl.models.parts.likelihoods.GaussianNoise` (learned from ten data
        on, else held at its floor, default ``1e-8`` in the output's standardised units;
        one floor for all outputs). A count output is the log of the counts' mean,
        conditioned on through the Laplace approximation
        (:mod:`~pyro_pidkl.models.conditioning.counts`).
    :param sources: what drives each equation, :math:`\psi_e[f] = g_e`: one part of
        :mod:`~pyro_pidkl.models.parts.sources` for every equation or ``{equation index:
        part}`` (default zero; :mod:`~pyro_pidkl.models.system.sources`). An unknown source
        (``pk.GPSource``, over the inputs the system differentiates unless named) or a known
        one makes the equation no longer the system's exact ODE: no shooting, no referee.
    :param conditions: known values of any output, measured or not, and of their
        derivatives: :class:`~pyro_pidkl.physics.Condition` objects whose operator reads the
        outputs by name (``Condition([[0.0]], lambda f, x: f["S"], 0.99)``), conditioned on
        like the equations (:mod:`~pyro_pidkl.models.system.conditions`); a value at the
        first time is a known initial state for the shooting stages too.
    :param int multistart: for an explicit ODE with data, the number of starts of the
        shooting stage's search over the coefficients and the initial states of outputs
        nobody measured (:mod:`~pyro_pidkl.models.conditioning.starts`; default: 64 per searched
        dimension, 64 to 512; ``0`` shoots from gradient matching's answer alone).
    :param scales: ``{output: (loc, scale)}`` (or ``scale`` alone): where an output's prior
        is centred and its size, in user units (default: its data's mean and spread; for an
        output never observed, ``(0, 1)``: give them when its size is known roughly;
        :func:`~pyro_pidkl.physics.observations.output_scales`).
    :param dict priors: priors on the GPs' own parameters by name (as
        :class:`PhysicsConditionedGP`; :meth:`hyperparameters` lists them).
    :param settings: ``residual_noise`` (:math:`\tau`, each equation's residual variance
        relative to its prior variance at the point, default ``1e-6``; a
        :class:`~pyro_pidkl.models.parts.residual.ResidualNoise` to learn it above a floor,
        held through the fit's loose stages), ``objective``
        (``"conditional"``, :math:`\log p(y \mid v)`, default, or ``"joint"``),
        ``newton_tol``, ``newton_max_iter``, ``parameter_uncertainty`` (as
        :class:`PhysicsConditionedGP`), ``dtype``; and the older keywords ``design``, ``seed``
        (the collocation's), ``noise``, ``noise_floor``, ``learn_noise`` (every Gaussian
        output's likelihood), ``likelihood`` (the default part), ``learn_residual_noise``,
        ``residual_noise_floor``.
    """

    def __init__(self, system, data, input_names=None, domain=None, collocation=None,
                 likelihoods=None, sources=None, conditions=(), scales=None, priors=None,
                 multistart=None, **settings):
        options = own_settings(settings, OWN_SETTINGS)
        dtype = options["dtype"]
        default = take_parts(settings, collocation, settings.pop("likelihood", None),
                             what="the default likelihood")
        if settings:
            raise TypeError(f"ConditionedSystemGP() got unexpected keyword arguments "
                            f"{sorted(settings)}")
        if default.likelihood.kind != "gaussian":
            raise ValueError(f"Expected a Gaussian default likelihood; got {default.likelihood!r}"
                             f" (counts: likelihoods={{output: ...}})")
        super().__init__()
        if not isinstance(system, EquationSystem):
            raise TypeError(f"Expected system to be a pyro_pidkl.physics.EquationSystem; got "
                            f"{type(system).__name__}")
        self.system = system = with_point_priors(claim(system, self))
        self.outputs = system.outputs
        parts, names = split_by_output(data, self.outputs, input_names or system.inputs, dtype)
        self.likelihood_parts = output_likelihoods(likelihoods, self.outputs, parts,
                                                   default.likelihood)
        parts = self._init_counts([p.kind for p in self.likelihood_parts], parts,
                                  {c: p.variance for c, p in enumerate(self.likelihood_parts)
                                   if p.kind == "lognormal"})
        system.check_inputs(names)
        self.input_names, self.input_dim = names, len(names)
        C = len(self.outputs)
        X_all = torch.cat([X for X, _ in parts])
        self.domain = (domain or Box()).resolve(X_all, names)
        low, high = self.domain.low, self.domain.high
        self.register_buffer("x_loc", (low + high) / 2)
        self.register_buffer("x_scale", (high - low) / math.sqrt(12.0))
        self._set_outputs(parts, scales, default.likelihood, dtype)
        self.register_buffer("X", X_all)       # every observation's inputs (long form)
        design, seed = default.collocation.design, default.collocation.seed
        Z = collocation_set(default.collocation.points, self.domain, names, design, seed, dtype)
        Z = self._set_conditions(conditions, Z)      # known values' points appended
        self.register_buffer("Z", Z)
        self.register_buffer("Z_s", (Z - self.x_loc) / self.x_scale)
        self.parts = default
        self.collocation_refine = default.collocation.refinements(REFINE_DEFAULT)
        subset = default.collocation.subset(FIT_COLLOCATION)
        self.fit_collocation = None if subset is None else positive_int(subset,
                                                                        "fit_collocation")
        self._set_residual_noise(default.residual)
        objective = options["objective"]
        if objective not in ("conditional", "joint"):
            raise ValueError(f"Expected objective to be 'conditional' or 'joint'; got "
                             f"{objective!r}")
        self.objective = objective
        self._set_newton(options["newton_tol"], options["newton_max_iter"])
        self.parameter_uncertainty = bool(options["parameter_uncertainty"])
        # which derivatives the system reads, how many equations, whether it is linear
        probe = Z[:: max(1, Z.shape[0] // 16)][:16]
        lin = linearise_system(system, [{}] * C, probe, names)
        self.num_equations = lin.h0.shape[0]
        indices = set().union(*lin.requested.values()) | {()}
        self.indices = sorted(indices, key=lambda i: (len(i), i))
        if any(len(i) > 4 for i in self.indices):
            raise ValueError(f"System {system.name!r} reads a derivative of order above 4; "
                             "ConditionedSystemGP supports orders up to 4")
        # with counts the working response moves with the fit: Gauss-Newton and Fisher
        # scoring run between the optimiser's runs, as for a nonlinear system
        self.linear = (is_linear_system(system, probe, names, seed=seed)
                       and not self.count_outputs)
        if self.num_equations < C:
            warn(f"System {system.name!r} has {self.num_equations} equation(s) for {C} outputs "
                 f"{self.outputs}: the outputs are not determined by it (an equation per "
                 f"output is the usual count)")
        coefficients = [(n, getattr(owner, p + "_unconstrained"))
                        for n, owner, p in self._coefficients()]
        unused = unused_coefficients(
            lambda g: linearise_system(system, [{i: torch.randn(probe.shape[0], generator=g,
                                                                 dtype=dtype)
                                                 for i in self.indices} for _ in range(C)],
                                       probe, names).h0,
            coefficients, seed=seed) if coefficients else []
        self._warn_unused(unused, "residuals", "system")
        self.ode = explicit_ode(system, names, seed=seed)     # None unless f' = F(t, f)
        priors = self._set_sources(sources, priors)           # a source: ode None
        if multistart is None:
            multistart = default_starts(len(coefficients), sum(n == 0 for n in self.counts))
        elif isinstance(multistart, bool) or not isinstance(multistart, int) or multistart < 0:
            raise ValueError(f"Expected multistart to be a number of starts >= 0; got "
                             f"{multistart!r}")
        self.multistart = int(multistart)
        self.multistart_result = None         # the last search (MultistartResult)
        self._shot = None                     # (start, ShootingResult) of the last shooting
        self.register_buffer("f0", torch.zeros(C, len(self.indices), Z.shape[0], dtype=dtype))
        self.register_buffer("f0_set", torch.tensor(False))
        self.register_buffer("fitted", torch.tensor(False))
        self._cache = None
        self._set_priors(priors)
        self._check_right_hand_sides()

    # -- parameters ----------------------------------------------------------------------
    @property
    def y_s(self):
        """Each output's data in its standardised units (a count output's: its working
        response, :mod:`~pyro_pidkl.models.conditioning.counts`)."""
        return [self._working_s(c) if c in self.count_outputs else y
                for c, y in enumerate(self._y_std)]

    @property
    def y_by_output(self):
        """Each output's data in user units (a count output's: its working response, on the
        scale of the log of the mean)."""
        return [self._working(c)[0] if c in self.count_outputs else y
                for c, y in enumerate(self._y_user)]

    def _coefficients(self):
        return [(n, self.system, n) for n, s in self.system.specs.items() if not s.fixed]

    def _what(self):
        return f"system {self.system.name!r}"

    def equation_parameters(self):
        """Current coefficients ``{name: float or list}``."""
        with torch.no_grad():
            return {n: getattr(self.system, n).detach().cpu().tolist()
                    for n in self.system.parameter_names}

    #: after a fit: the best stage kept
    #: (:func:`~pyro_pidkl.models.conditioning.stages.keep_best_stage`), the collocation
    #: refined while an equation fails between its points
    #: (:func:`~pyro_pidkl.models.conditioning.resolution.resolve`), then an explicit ODE
    #: refereed on its exact likelihood
    after_fit_stages = (("stages", keep_best_stage), ("refine", resolve), ("referee", referee))

    def _exact_problem(self):
        return system_problem(self)

    # -- adequacy (LinearisedConditioning.adequacy) -------------------------------------------
    def _log_evidence_ratio(self):
        r""":math:`\log p(y \mid v) - \sum_c \log p(y_c)`: the fit's data density given
        the system against the best SE-ARD GP of each observed output's data alone
        (:func:`~pyro_pidkl.gp.data_fit.fit_data_only`, several starts)."""
        if sum(self.counts) < 3 or self.count_outputs:    # counts: no Gaussian reference
            return math.nan
        conditional = float(self.solve()[0].log_prob_data_given_virtual())
        alone = 0.0
        for c, (U, y) in enumerate(zip(self.X_s, self.y_s)):
            if not self.counts[c]:
                continue
            found = fit_data_only(U, (y - self.mean[c]).detach(), 1e-8,
                                  lengthscale=REFERENCE_LENGTHSCALES)
            if found is None:
                return math.nan
            alone += found.log_likelihood
        return conditional - alone

    # -- predictions -------------------------------------------------------------------------
    # -- Laplace -------------------------------------------------------------------------------
    def _nuisance_parameters(self):
        """The GPs' own parameters (lengthscales, variances, noises, unobserved means)."""
        return [p for name, p in self.named_parameters()
                if not name.startswith("system.") and p.requires_grad]
