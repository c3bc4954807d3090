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
from pyro.nn import PyroModule, PyroParam
from torch.distributions import constraints

from ...checks import warn, warn_if_interrupted
from ...gp.data_fit import fit_data_only
from ...kernels.se import se_ard
from ...physics.collocation import collocation_set, half_spacing
from ...physics.domain import Box
from ...physics.linearise import unused_coefficients
from ...physics.ode import explicit_ode
from ...physics.system import EquationSystem, is_linear_system, linearise_system
from ...param_scope import own_parameters
from ..conditioning.conditioned import ConditionedModel
from ..conditioning.linearised import REFERENCE_LENGTHSCALES
from ..conditioning.parameter_uncertainty import with_point_priors
from .counts import CountObservations, output_likelihoods
from ..parts import take_parts
from ...physics.observations import output_scales, split_by_output
from .conditions import SystemConditions
from .joint import SystemJoint
from .matching import TrajectoryMatching
from ..conditioning.referee import referee, system_problem
from ..conditioning.stages import keep_best_stage
from ..conditioning.starts import default_starts

__all__ = ["ConditionedSystemGP"]

#: each output's prior variance stays below this, in its standardised units (the data's
#: spread is 1): the residual noise is relative to the prior variance of the operator, so a
#: variance free to grow loosens every equation with it (on twenty years of lynx and hare
#: counts it reached 7e5, and the posterior mean missed the equation by 20-38% of its terms)
MAX_VARIANCE = 1e2

#: and above this: a prior whose spread is a tenth of the data's cannot hold them, and one
#: that collapses is a degenerate optimum (the README's spring ended at 4e-10 and 3e-11,
#: its coefficients then unidentified)
MIN_VARIANCE = 1e-2

#: the fewest collocation spacings a lengthscale spans (:meth:`ConditionedSystemGP._log_lengthscale_floor`):
#: an SE kernel at two spacings carries an equation between its points, at one it does not
RESOLVED_SPACINGS = 2.0

#: where a learned noise starts without a data-only fit, and a held one's value by default
#: (each output's standardised units)
NOISE = 1e-2

#: the noise's floor by default
NOISE_FLOOR = 1e-8

#: the model's own settings besides its parts, with their defaults
OWN_SETTINGS = {"objective": "conditional", "newton_tol": 1e-6, "newton_max_iter": 30,
                "parameter_uncertainty": True, "dtype": torch.float64}


def noise_floor_of(likelihoods, default):
    """The one noise floor of a system's Gaussian outputs (:data:`NOISE_FLOOR` unless a
    likelihood part sets it; parts that set different floors are refused in one line)."""
    floors = {p.floor for p in [default, *likelihoods]
              if p.kind == "gaussian" and p.floor is not None}
    if len(floors) > 1:
        raise ValueError(f"Expected one noise floor for every Gaussian output of a system; got "
                         f"{sorted(floors)}")
    return floors.pop() if floors else NOISE_FLOOR


def _fill(held, index, learned):
    """``held`` ``(C,)`` with the entries at ``index`` replaced by ``learned`` (kept
    differentiable)."""
    if not index:
        return held
    return held.index_put((torch.tensor(index),), learned)


class ConditionedSystemGP(SystemJoint, SystemConditions, TrajectoryMatching,
                          CountObservations, ConditionedModel, PyroModule):
    r"""GPs of a system's outputs conditioned on their data and on the system (module
    docstring).

    :param system: an :class:`~pyro_pidkl.physics.EquationSystem`.
    :param data: ``{output: (X_c, y_c)}`` (each output at its own inputs; outputs left out
        are never observed) or ``(X, Y)`` with ``Y`` ``(N, C)`` and ``NaN`` where not
        observed (:func:`~pyro_pidkl.physics.observations.split_by_output`).
    :param input_names: the names of the input columns (default: the system's ``inputs``).
    :param domain: a :class:`~pyro_pidkl.physics.Box` where the system holds (default: the
        data's box; give the whole interval to predict beyond the data).
    :param collocation: the number of collocation points (default ``200 d``) or an
        ``(M, d)`` tensor; every equation holds at each of them.
    :param str design: ``"sobol"`` (default), ``"grid"`` or ``"random"``.
    :param float residual_noise: :math:`\tau`, each equation's residual variance relative to
        its prior variance at the point (as :class:`PhysicsConditionedGP`).
    :param scales: ``{output: (loc, scale)}`` (or ``scale`` alone): where an output's prior
        is centred and its size, in user units (default: its data's mean and spread; for an
        output never observed, ``(0, 1)``: give them when its size is known roughly;
        :func:`~pyro_pidkl.physics.observations.output_scales`).
    :param learn_noise: learn each observed output's noise (``True``), hold it at
        ``noise`` (``False``), or (``None``, default) learn it for outputs with ten data or
        more.
    :param float noise: noise variance in the output's standardised units (where a learned
        noise starts when there is no data-only fit to start from).
    :param str objective: ``"conditional"`` (default, :math:`\log p(y \mid v)`) or
        ``"joint"``.
    :param bool parameter_uncertainty: predictions carry the Laplace uncertainty of the
        coefficients and the GPs' identified parameters once fitted (as
        :class:`PhysicsConditionedGP`).
    :param dict priors: priors on the GPs' own parameters by name (as
        :class:`PhysicsConditionedGP`; :meth:`hyperparameters` lists them).
    :param dict likelihoods: ``{output: "poisson" | "negative_binomial"}``: that output is
        the log of the mean of counts observed with that likelihood (its dispersion learned),
        conditioned on through the Laplace approximation
        (:mod:`~pyro_pidkl.models.system.counts`; write the system for the logs, as for
        log-normal data); the others are Gaussian.
    :param conditions: known values of any output, measured or not, and of their
        derivatives: :class:`~pyro_pidkl.physics.Condition` objects whose operator reads the
        outputs by name (``Condition([[0.0]], lambda f, x: f["S"], 0.99)``), conditioned on
        like the equations (:mod:`~pyro_pidkl.models.system.conditions`); a value at the
        first time is a known initial state for the shooting stages too.
    :param int multistart: for an explicit ODE with data, the number of starts of the
        shooting stage's search over the coefficients and the initial states of outputs
        nobody measured (:mod:`~pyro_pidkl.models.conditioning.starts`; default: 64 per searched
        dimension, 64 to 512; ``0`` shoots from gradient matching's answer alone).
    """

    def __init__(self, system, data, input_names=None, domain=None, collocation=None,
                 likelihoods=None, conditions=(), scales=None, priors=None, multistart=None,
                 **settings):
        options = {k: settings.pop(k) for k in list(settings) if k in OWN_SETTINGS}
        options = {**OWN_SETTINGS, **options}
        dtype = options["dtype"]
        default = take_parts(settings, collocation, settings.pop("likelihood", None),
                             what="the default likelihood")
        if settings:
            raise TypeError(f"ConditionedSystemGP() got unexpected keyword arguments "
                            f"{sorted(settings)}")
        if default.likelihood.kind != "gaussian":
            raise ValueError(f"Expected a Gaussian default likelihood; got {default.likelihood!r}"
                             f" (counts: likelihoods={{output: ...}})")
        if default.residual.learn:
            raise ValueError("Expected a held residual noise for ConditionedSystemGP "
                             "(learn_residual_noise is PhysicsConditionedGP's)")
        for what in ("refine", "fit_subset"):
            if getattr(default.collocation, what) != "auto":
                raise ValueError(f"Expected Collocation({what}='auto') for ConditionedSystemGP "
                                 f"(it neither refines its points nor fits on a subset); got "
                                 f"{getattr(default.collocation, what)!r}")
        super().__init__()
        if not isinstance(system, EquationSystem):
            raise TypeError(f"Expected system to be a pyro_pidkl.physics.EquationSystem; got "
                            f"{type(system).__name__}")
        self.system = system = with_point_priors(system)
        self.outputs = system.outputs
        parts, names = split_by_output(data, self.outputs, input_names or system.inputs, dtype)
        self.likelihood_parts = output_likelihoods(likelihoods, self.outputs, parts,
                                                   default.likelihood)
        parts = self._init_counts([p.kind for p in self.likelihood_parts], parts)
        system.check_inputs(names)
        self.input_names, self.input_dim = names, len(names)
        C = len(self.outputs)
        X_all = torch.cat([X for X, _ in parts])
        self.domain = (domain or Box()).resolve(X_all, names)
        low, high = self.domain.low, self.domain.high
        self.register_buffer("x_loc", (low + high) / 2)
        self.register_buffer("x_scale", (high - low) / math.sqrt(12.0))
        locs, sds = output_scales([y for _, y in parts], self.outputs, scales)
        self.X_by_output, self._y_user, self.X_s, self._y_std = [], [], [], []
        for (X, y), loc, sd in zip(parts, locs, sds):
            self.X_by_output.append(X)
            self._y_user.append(y)
            self.X_s.append((X - self.x_loc) / self.x_scale)
            self._y_std.append((y - loc) / sd)
        self.register_buffer("y_loc", torch.tensor(locs, dtype=dtype))
        self.register_buffer("y_scale", torch.tensor(sds, dtype=dtype))
        self.counts = [int(y.shape[0]) for y in self._y_user]
        self.register_buffer("X", X_all)       # every observation's inputs (long form)
        # priors: one SE-ARD kernel per output, started from a data-only fit where there are
        # data (others at the observed outputs' median lengthscale)
        fits = [fit_data_only(U, y) if y.shape[0] >= 3 else None
                for U, y in zip(self.X_s, self._y_std)]
        found = [f.lengthscale for f in fits if f is not None]
        typical = (torch.stack(found).median(0).values if found
                   else torch.ones(self.input_dim, dtype=dtype))
        self.kernels = PyroModule[torch.nn.ModuleList](
            [se_ard(self.input_dim, dtype=dtype) for _ in self.outputs])
        with torch.no_grad():
            for kern, f in zip(self.kernels, fits):
                kern.lengthscale = PyroParam(
                    (f.lengthscale if f is not None else typical).clamp(0.05, 20.0).clone(),
                    constraints.positive)
        # an observed output's prior is centred on its data (0 after standardising); an
        # unobserved one's centre is learned
        self.mean_learned = [c for c in range(C) if not self.counts[c]]
        self.register_buffer("mean_held", torch.zeros(C, dtype=dtype))
        if self.mean_learned:
            self.mean_unobserved = PyroParam(torch.zeros(len(self.mean_learned), dtype=dtype))
        # noise: learned for outputs with enough data, held at its floor for the others
        noise_floor = noise_floor_of(self.likelihood_parts, default.likelihood)
        gaussian = [p if p.kind == "gaussian" else None for p in self.likelihood_parts]
        # a count output's noise is its likelihood's: no Gaussian noise besides
        learned = [g is not None and (n >= 10 if g.learn is None else bool(g.learn) and n > 0)
                   for g, n in zip(gaussian, self.counts)]
        self.noise_learned = [c for c in range(C) if learned[c]]
        start = [max(f.noise_ratio, 10 * noise_floor) if f is not None else
                 (g.noise if g is not None and g.noise is not None else NOISE)
                 for f, g in zip(fits, gaussian)]
        # held: at its floor by default (too few data to tell noise from signal: one
        # initial value pins a trajectory), at its ``noise`` when the user holds it
        # (a count output's: as the default likelihood's, besides its working response)
        held = [noise_floor if h.learn is None else (NOISE if h.noise is None else h.noise)
                for h in (g or default.likelihood for g in gaussian)]
        self.register_buffer("noise_held", torch.tensor(held, dtype=dtype))
        if self.noise_learned:
            self.noise = PyroParam(torch.tensor([start[c] for c in self.noise_learned],
                                                dtype=dtype),
                                   constraints.greater_than(float(noise_floor)))
        design, seed = default.collocation.design, default.collocation.seed
        Z = collocation_set(default.collocation.points, self.domain, names, design, seed, dtype)
        Z = self._set_conditions(conditions, Z)      # known values' points appended
        self.register_buffer("Z", Z)
        self.register_buffer("Z_s", (Z - self.x_loc) / self.x_scale)
        self.parts = default
        self.register_buffer("residual_noise",
                             torch.tensor(float(default.residual.value), dtype=dtype))
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
        if multistart is None:
            multistart = default_starts(len(coefficients), sum(n == 0 for n in self.counts))
        elif isinstance(multistart, bool) or not isinstance(multistart, int) or multistart < 0:
            raise ValueError(f"Expected multistart to be a number of starts >= 0; got "
                             f"{multistart!r}")
        self.multistart = int(multistart)
        self.multistart_result = None         # the last search (MultistartResult)
        self._loose_start = False
        self._shot = None                     # (start, ShootingResult) of the last shooting
        self.register_buffer("f0", torch.zeros(C, len(self.indices), Z.shape[0], dtype=dtype))
        self.register_buffer("f0_set", torch.tensor(False))
        self.register_buffer("fitted", torch.tensor(False))
        self._cache = None
        self._set_priors(priors)
        self._check_right_hand_sides()

    # -- parameters ----------------------------------------------------------------------
    @property
    def mean(self):
        r""":math:`m_c`, each output's prior centre in standardised units ``(C,)``."""
        return _fill(self.mean_held, self.mean_learned, getattr(self, "mean_unobserved", None))

    def noises(self):
        """Each output's noise variance in its standardised units ``(C,)``."""
        return _fill(self.noise_held, self.noise_learned, getattr(self, "noise", None))

    @property
    def y_s(self):
        """Each output's data in its standardised units (a count output's: its working
        response, :mod:`~pyro_pidkl.models.system.counts`)."""
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

    def continuation(self):
        r"""The stages :func:`~pyro_pidkl.infer.fit` runs before the fit itself when the
        system has learned coefficients. First :meth:`match_gradients`, then, for an
        explicit ODE with data, :meth:`match_trajectories` (shooting); then the residual
        noise :math:`\tau` at :math:`10^{-1}, 10^{-2}, \dots` down to the model's own, each
        fit starting from the last. Held loosely, the equations leave the GPs to follow the
        data and the coefficients' objective has one broad optimum (close to gradient
        matching); held tightly from the start, the marginal likelihood of an oscillator's
        coefficients has many (on FitzHugh-Nagumo, from a = b = 0.5, c = 1, the fit ended at
        c = 0.9 with the truth's 3.0 a hundred nats better). After a shooting fit there are
        no stages, the fit held tightly at once (on a trajectory of the ODE already; loose
        stages let an unobserved output drift: SIR's susceptibles collapsed to a constant),
        except in the second start (:attr:`starts`), which runs them all. The model's
        :math:`\tau` is put back at the end."""
        if not self._coefficients():
            return
        self.match_gradients()
        shot = self.match_trajectories()
        target = float(self.residual_noise)
        tight = shot is not None and shot.improved and not self._loose_start
        tau = target if tight else 1e-1
        try:
            while tau > 10 * target:
                self.residual_noise.fill_(tau)
                self._cache = None
                yield tau
                tau /= 10
        finally:
            self.residual_noise.fill_(target)
            self._loose_start = False
            self._cache = None

    @property
    def starts(self):
        """Starts of a fit, each through :meth:`continuation`, the best final objective kept
        (as :attr:`PhysicsConditionedGP.starts`). Without shooting: the coefficients as
        given, and moved by a factor of three either way (``log 3`` in their unconstrained
        space; on FitzHugh-Nagumo one continuation ended 63 nats below the truth's basin).
        With shooting (an explicit ODE with data), which finds its own start: two, held
        tightly at once and through every stage from :math:`10^{-1}`
        (:meth:`continuation`)."""
        if not self._coefficients():
            return [0.0]
        if self._shoots():
            return [0.0, 0.0]
        return [0.0, math.log(3.0), -math.log(3.0)]

    def after_fit(self, refit):
        """What :func:`~pyro_pidkl.infer.fit` calls when a fit ends: the fit keeps its best
        stage (:func:`~pyro_pidkl.models.conditioning.stages.keep_best_stage`)."""
        keep_best_stage(self, refit)
        referee(self, refit)

    def _exact_problem(self):
        return system_problem(self)

    def _shoots(self):
        """Whether the fit starts by shooting (:meth:`match_trajectories`): an explicit ODE
        with data."""
        return self.ode is not None and sum(self.counts) > 0

    def _begin_start(self, r, start):
        """Start ``r``: the second of a shooting fit's starts runs every stage
        (:meth:`continuation`); returns its coefficients' move."""
        self._loose_start = self._shoots() and r % len(self.starts) == 1
        return start

    def parameter_bounds(self):
        """Lengthscales stay above their floor (:meth:`_log_lengthscale_floor`); an observed output's prior variance
        between :data:`MIN_VARIANCE` and :data:`MAX_VARIANCE` of its data's; an unobserved
        output's is held where its scale (``scales``, or the shooting stage's trajectory)
        puts it: no datum says how large its prior should be, and the marginal likelihood,
        free to choose, shrank the README spring's velocity to 0.01 (its fit then missed
        the velocity by 1.4 at the start)."""
        out = {k.lengthscale_unconstrained: (self._log_lengthscale_floor(c), None)
               for c, k in enumerate(self.kernels)}
        out.update(self._held_coefficient_bounds())       # keep_best_stage holds them
        for c, k in enumerate(self.kernels):
            if self.counts[c]:
                out[k.variance_unconstrained] = (math.log(MIN_VARIANCE),
                                                 math.log(MAX_VARIANCE))
            else:               # no data: held where its scale (or its trajectory) puts it
                u = float(k.variance_unconstrained.detach())
                out[k.variance_unconstrained] = (u, u)
        return out

    def _log_lengthscale_floor(self, c=None):
        """The log of output ``c``'s lengthscale's lower bound in standardised units (default:
        the lowest of them): half the spacing of all the points; for an output nobody
        measured, or one observed as counts (whose data do not pin its lengthscale: the
        objective drives it to the lowest allowed), at least :data:`RESOLVED_SPACINGS`
        spacings of the equations' collocation points. Below that the equations hold at the
        points and not between them (the README spring's unmeasured velocity went to about
        one spacing at every collocation count tried, 200 to 800, and its equations then
        failed between the points by 15-28% of their terms; held at two spacings, 2.5%; the
        coefficients unchanged). An output measured with Gaussian noise keeps the lower
        bound: its data set its lengthscale, and FitzHugh-Nagumo's fast transitions need one
        under two spacings of the default points (held there, its predictions beyond the
        data fell from RMSE 0.02 to 0.5)."""
        half = half_spacing(sum(self.counts) + self.Z.shape[0], self.input_dim)
        if c is None:
            return math.log(half)
        if self.counts[c] and c not in self.count_outputs:
            return math.log(half)
        M = self.Z.shape[0] - getattr(self, "condition_rows", 0)
        return math.log(max(half,
                            RESOLVED_SPACINGS * 2 * half_spacing(max(M, 1), self.input_dim)))

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

    def _noise_is_learned(self):
        return bool(self.noise_learned)

    # -- predictions -------------------------------------------------------------------------
    def _check_new_inputs(self, Xnew):
        X = torch.as_tensor(Xnew, dtype=self.Z.dtype)
        X = X[:, None] if X.dim() == 1 and self.input_dim == 1 else X
        if X.dim() != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"Expected Xnew of shape (P, {self.input_dim}) for inputs "
                             f"{self.input_names}; got {tuple(X.shape)}")
        return X

    @own_parameters
    def forward(self, Xnew, noiseless=True):
        r"""Posterior means and variances of every output at ``Xnew`` ``(P, d)`` in user
        units: ``(mean, var)``, each ``(P, C)`` in the order of ``outputs`` (with
        ``noiseless=False`` the variance of a new observation). Pure: nothing is written."""
        U = (self._check_new_inputs(Xnew) - self.x_loc) / self.x_scale
        warn_if_interrupted(self)
        with torch.no_grad():
            joint = self.solve()[0]
            means, variances = [], []
            for c, kern in enumerate(self.kernels):
                cross = self._cross(joint, c, U)
                mean = joint.mean(cross) + self.mean[c]
                var = joint.variance(cross, kern(U, diag=True))
                # an unobserved output's centre is a parameter: it moves between the points
                var = var + self._parameter_spread(
                    lambda at: at.mean(self._cross(at, c, U)) + self.mean[c])
                if not noiseless:
                    if c in self.count_outputs:
                        raise ValueError(f"Expected noiseless=True for count output "
                                         f"{self.outputs[c]!r}: its new observations are "
                                         f"counts (model.predict_counts(X))")
                    var = var + self.noises()[c]
                means.append(self.y_loc[c] + self.y_scale[c] * mean)
                variances.append(self.y_scale[c] ** 2 * var)
            return torch.stack(means, 1), torch.stack(variances, 1)

    # -- Laplace -------------------------------------------------------------------------------
    def _nuisance_parameters(self):
        """The GPs' own parameters (lengthscales, variances, noises, unobserved means)."""
        return [p for name, p in self.named_parameters()
                if not name.startswith("system.") and p.requires_grad]
