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

gives ``E`` virtual observations at each of ``M`` collocation points. Because the outputs
are independent a priori, their covariances are sums over outputs,

.. math::
    \operatorname{cov}(v_e, v_{e'}) = \sum_c \mathcal{L}_{e,c} \mathcal{L}'_{e',c}\,k_c(Z, Z)
        + \tau\,\operatorname{diag}, \qquad
    \operatorname{cov}(v_e, y_c) = \mathcal{L}_{e,c}\, k_c(Z, X_c), \qquad
    \operatorname{cov}(y_c, y_{c'}) = \delta_{cc'} (k_c(X_c, X_c) + \sigma_c^2 I),

so an output that is never observed is still determined, with an interval, through the
equations that couple it to the others. Kernels, means, noises and the system's unknown
coefficients maximise :math:`\log p(y \mid v)` (or :math:`\log p(v, y)`,
``objective="joint"``) with L-BFGS (:func:`~pyro_pidkl.infer.fit`); Laplace intervals for
the coefficients come from :func:`~pyro_pidkl.infer.laplace.coefficient_intervals`, and
predictions carry them as the single-output model's do.
"""

import math

import numpy as np
import pyro
import torch
from pyro.nn import PyroModule, PyroParam, pyro_method
from torch.distributions import constraints

from ..checks import positive_int, warn, warn_if_interrupted
from ..gp.data_fit import fit_data_only
from ..gp.joint import JointGaussian
from ..infer.laplace import parameters_at
from ..kernels.operators import OperatorCovariance
from ..kernels.se import se_ard
from ..physics.collocation import collocation_points, given_points, maximin_subset
from ..physics.domain import Box
from ..physics.linearise import JetField, unused_coefficients
from ..physics.ode import explicit_ode
from ..physics.system import EquationSystem, is_linear_system, linearise_system
from ..param_scope import own_parameters
from .linearised import LinearisedConditioning, with_point_priors
from .system_starts import default_starts, shoot_from_many_starts
from .system_stages import keep_best_stage
from .system_data import split_by_output

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


def _set(module, name, value):
    """Write ``value`` into PyroParam ``name`` of ``module`` (through its constraint)."""
    constraint = module._pyro_params[name][0]
    u = getattr(module, name + "_unconstrained")
    u.copy_(torch.distributions.transform_to(constraint).inv(
        torch.as_tensor(value, dtype=u.dtype)).reshape(u.shape))


def _fill(held, index, learned):
    """``held`` ``(C,)`` with the entries at ``index`` replaced by ``learned`` (kept
    differentiable)."""
    if not index:
        return held
    return held.index_put((torch.tensor(index),), learned)


class ConditionedSystemGP(LinearisedConditioning, PyroModule):
    r"""GPs of a system's outputs conditioned on their data and on the system (module
    docstring).

    :param system: an :class:`~pyro_pidkl.physics.EquationSystem`.
    :param data: ``{output: (X_c, y_c)}`` (each output at its own inputs; outputs left out
        are never observed) or ``(X, Y)`` with ``Y`` ``(N, C)`` and ``NaN`` where not
        observed (:func:`~pyro_pidkl.models.system_data.split_by_output`).
    :param input_names: the names of the input columns (default: the system's ``inputs``).
    :param domain: a :class:`~pyro_pidkl.physics.Box` where the system holds (default: the
        data's box; give the whole interval to predict beyond the data).
    :param collocation: the number of collocation points (default ``200 d``) or an
        ``(M, d)`` tensor; every equation holds at each of them.
    :param str design: ``"sobol"`` (default), ``"grid"`` or ``"random"``.
    :param float residual_noise: :math:`\tau`, each equation's residual variance relative to
        its prior variance at the point (as :class:`PhysicsConditionedGP`).
    :param scales: ``{output: (loc, scale)}``: where an output's prior is centred and its
        size, in user units (default: its data's mean and spread; for an output never
        observed, ``(0, 1)``: give them when its size is known roughly).
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
    :param int multistart: for an explicit ODE with data, the number of starts of the
        shooting stage's search over the coefficients and the initial states of outputs
        nobody measured (:mod:`~pyro_pidkl.models.system_starts`; default: 64 per searched
        dimension, 64 to 512; ``0`` shoots from gradient matching's answer alone).
    """

    deterministic = True
    guide_is_prior = True

    def __init__(self, system, data, input_names=None, domain=None, collocation=None,
                 design="sobol", residual_noise=1e-6, scales=None, learn_noise=None,
                 noise=1e-2, noise_floor=1e-8, objective="conditional", newton_tol=1e-6,
                 newton_max_iter=30, seed=0, parameter_uncertainty=True, priors=None,
                 multistart=None, dtype=torch.float64):
        super().__init__()
        if not isinstance(system, EquationSystem):
            raise TypeError(f"Expected system to be a pyro_pidkl.physics.EquationSystem; got "
                            f"{type(system).__name__}")
        self.system = system = with_point_priors(system)
        self.outputs = system.outputs
        parts, names = split_by_output(data, self.outputs, input_names or system.inputs, dtype)
        system.check_inputs(names)
        self.input_names, self.input_dim = names, len(names)
        C = len(self.outputs)
        X_all = torch.cat([X for X, _ in parts])
        self.domain = (domain or Box()).resolve(X_all, names)
        low, high = self.domain.low, self.domain.high
        self.register_buffer("x_loc", (low + high) / 2)
        self.register_buffer("x_scale", (high - low) / math.sqrt(12.0))
        scales = dict(scales or {})
        unknown = [k for k in scales if k not in self.outputs]
        if unknown:
            raise ValueError(f"Expected scales for outputs among {self.outputs}; got "
                             f"{tuple(unknown)}")
        self.X_by_output, self.y_by_output, self.X_s, self.y_s = [], [], [], []
        locs, sds = [], []
        for o, (X, y) in zip(self.outputs, parts):
            if o in scales:
                loc, sd = (float(v) for v in scales[o])
            elif y.shape[0]:
                loc, sd = float(y.mean()), float(y.std(unbiased=False))
                sd = sd if sd > 1e-8 * max(float(y.abs().max()), 1e-300) else \
                    max(float(y.abs().max()), 1.0)
            else:
                loc, sd = 0.0, 1.0
            if not (math.isfinite(loc) and sd > 0 and math.isfinite(sd)):
                raise ValueError(f"Expected scales[{o!r}] = (loc, scale > 0); got {(loc, sd)}")
            locs.append(loc)
            sds.append(sd)
            self.X_by_output.append(X)
            self.y_by_output.append(y)
            self.X_s.append((X - self.x_loc) / self.x_scale)
            self.y_s.append((y - loc) / sd)
        self.register_buffer("y_loc", torch.tensor(locs, dtype=dtype))
        self.register_buffer("y_scale", torch.tensor(sds, dtype=dtype))
        self.counts = [int(y.shape[0]) for y in self.y_by_output]
        self.register_buffer("X", X_all)       # every observation's inputs (long form)
        # priors: one SE-ARD kernel per output, started from a data-only fit where there are
        # data (others at the observed outputs' median lengthscale)
        fits = [fit_data_only(U, y) if y.shape[0] >= 3 else None
                for U, y in zip(self.X_s, self.y_s)]
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
        if learn_noise is None:
            learned = [n >= 10 for n in self.counts]
        else:
            learned = [bool(learn_noise) and n > 0 for n in self.counts]
        self.noise_learned = [c for c in range(C) if learned[c]]
        start = [max(f.noise_ratio, 10 * noise_floor) if f is not None else noise
                 for f in fits]
        # held: at its floor by default (too few data to tell noise from signal: one
        # initial value pins a trajectory), at ``noise`` when the user holds it
        held = noise_floor if learn_noise is None else noise
        self.register_buffer("noise_held", torch.full((C,), float(held), dtype=dtype))
        if self.noise_learned:
            self.noise = PyroParam(torch.tensor([start[c] for c in self.noise_learned],
                                                dtype=dtype),
                                   constraints.greater_than(float(noise_floor)))
        Z = self._collocation(collocation, design, seed, dtype)
        self.register_buffer("Z", Z)
        self.register_buffer("Z_s", (Z - self.x_loc) / self.x_scale)
        if not (residual_noise > 0 and math.isfinite(residual_noise)):
            raise ValueError(f"Expected residual_noise > 0; got {residual_noise}")
        self.register_buffer("residual_noise", torch.tensor(float(residual_noise), dtype=dtype))
        if objective not in ("conditional", "joint"):
            raise ValueError(f"Expected objective to be 'conditional' or 'joint'; got "
                             f"{objective!r}")
        self.objective = objective
        if not newton_tol > 0:
            raise ValueError(f"Expected newton_tol > 0; got {newton_tol!r}")
        self.newton_tol = float(newton_tol)
        self.newton_max_iter = positive_int(newton_max_iter, "newton_max_iter")
        self.parameter_uncertainty = bool(parameter_uncertainty)
        # which derivatives the system reads, how many equations, whether it is linear
        probe = Z[:: max(1, Z.shape[0] // 16)][:16]
        lin = linearise_system(system, [{}] * C, probe, names)
        self.num_equations = lin.h0.shape[0]
        indices = set().union(*lin.requested.values()) | {()}
        self.indices = sorted(indices, key=lambda i: (len(i), i))
        if any(len(i) > 4 for i in self.indices):
            raise ValueError(f"System {system.name!r} reads a derivative of order above 4; "
                             "ConditionedSystemGP supports orders up to 4")
        self.linear = is_linear_system(system, probe, names, seed=seed)
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
        if unused:
            warn(f"{', '.join(unused)} never enter{'s' if len(unused) == 1 else ''} the "
                 f"residuals of system {system.name!r}: the fit cannot learn "
                 f"{'it' if len(unused) == 1 else 'them'} (fix them, or check the system)")
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

    def _collocation(self, collocation, design, seed, dtype):
        if collocation is None:
            collocation = 200 * self.input_dim
        if isinstance(collocation, torch.Tensor) or hasattr(collocation, "shape"):
            return given_points(collocation, self.input_names, dtype)
        return collocation_points(self.domain, positive_int(collocation, "collocation"),
                                  design, seed).to(dtype)

    # -- parameters ----------------------------------------------------------------------
    @property
    def mean(self):
        r""":math:`m_c`, each output's prior centre in standardised units ``(C,)``."""
        return _fill(self.mean_held, self.mean_learned, getattr(self, "mean_unobserved", None))

    def noises(self):
        """Each output's noise variance in its standardised units ``(C,)``."""
        return _fill(self.noise_held, self.noise_learned, getattr(self, "noise", None))

    def _coefficients(self):
        return [(n, self.system, n) for n, s in self.system.specs.items() if not s.fixed]

    def _what(self):
        return f"system {self.system.name!r}"

    def coefficient_spec(self, name):
        """The :class:`~pyro_pidkl.physics.Parameter` of learned coefficient ``name``."""
        return self.system.specs[name]

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
        stage (:func:`~pyro_pidkl.models.system_stages.keep_best_stage`)."""
        keep_best_stage(self, refit)

    def _shoots(self):
        """Whether the fit starts by shooting (:meth:`match_trajectories`): an explicit ODE
        with data."""
        return self.ode is not None and sum(self.counts) > 0

    @property
    def default_restarts(self):
        return len(self.starts) - 1

    def restart(self, r):
        """Start ``r`` of a fit (:attr:`starts`)."""
        self._loose_start = self._shoots() and r == 1
        with torch.no_grad():
            for _, owner, p in self._coefficients():
                getattr(owner, p + "_unconstrained").add_(self.starts[r])

    def match_gradients(self, max_iter=500):
        r"""Set the learned coefficients by gradient matching (Varah 1982; Ramsay et al.
        2007's starting point): the least-squares fit of the residuals
        :math:`\sum_e \overline{\psi_e[\hat f](Z)^2}`, each equation scaled by its mean
        square at the start, at the jets :math:`\hat f` of each observed output's data-only
        GP mean. An output with no data enters as a GP mean of its own kernel through
        weights at ``P`` points of Z (a maximin subset, 30 per input),
        :math:`\hat f_c = \mu_c + s_{y,c} (m_c + k_c(\cdot, P)\, a_c)`, the weights
        :math:`a_c` fitted with the coefficients (and kept small by
        :math:`10^{-3} a_c^\top k_c(P, P)\, a_c / M`). Cheap, and close enough for the
        continuation (:meth:`continuation`, which calls it first) to start in the right
        basin; the matched jets are where Gauss-Newton starts.

        :returns: the fitted coefficients ``{name: value}``."""
        import scipy.optimize
        with torch.no_grad():
            jets = self._data_jet()
        M = self.Z.shape[0]
        hidden = [c for c in range(len(self.outputs)) if not self.counts[c]]
        P = self.Z_s[maximin_subset(self.Z_s, min(M, 30 * self.input_dim))]
        basis, gram = {}, {}
        with torch.no_grad():
            for c in hidden:
                ZP = OperatorCovariance(self.kernels[c], self.Z_s, P)
                basis[c] = (torch.stack([ZP({i: 1.0}, {(): 1.0}) for i in self.indices])
                            * self._jet_scales(c)[:, None, None])
                gram[c] = self.kernels[c](P)
        weights = [torch.zeros(P.shape[0], dtype=self.Z.dtype) for _ in hidden]
        theta = [getattr(owner, p + "_unconstrained") for _, owner, p in self._coefficients()]
        free = theta + weights
        sizes = [t.numel() for t in free]

        def current_jets():
            out = [jets[c] for c in range(len(self.outputs))]
            for c, a in zip(hidden, weights):
                out[c] = jets[c] + basis[c] @ a
            return out

        def residuals():
            fields = [JetField({i: j[k] for k, i in enumerate(self.indices)}, self.Z,
                               self.input_names, allowed=self.system.inputs, leaves=False)
                      for j in current_jets()]
            return self.system.evaluate(dict(zip(self.outputs, fields)), self.Z,
                                        self.input_names)

        with torch.no_grad():
            weight = residuals().pow(2).mean(1).clamp(min=1e-300)

        def fun(x):
            with torch.no_grad():
                for t, v in zip(free, torch.split(torch.as_tensor(x, dtype=self.Z.dtype),
                                                  sizes)):
                    t.copy_(v.reshape(t.shape))
            for t in free:
                t.grad = None
                t.requires_grad_(True)
            value = (residuals().pow(2).mean(1) / weight).sum()
            for c, a in zip(hidden, weights):
                value = value + 1e-3 * (a @ gram[c] @ a) / M
            value.backward()
            grad = torch.cat([(t.grad if t.grad is not None else torch.zeros_like(t))
                              .reshape(-1) for t in free])
            if not (torch.isfinite(value) and bool(torch.isfinite(grad).all())):
                return 1e300, np.zeros(sum(sizes))
            return float(value.detach()), grad.detach().numpy()

        x0 = torch.cat([t.detach().reshape(-1) for t in free]).numpy()
        start = fun(x0)[0]
        res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B",
                                      options={"maxiter": max_iter})
        fun(res.x if res.fun < start else x0)
        with torch.no_grad():
            for a in weights:
                a.requires_grad_(False)
            if hidden and not self.linear:
                self.f0.copy_(torch.stack(current_jets()))
                self.f0_set.fill_(True)
        self._cache = None
        return self.equation_parameters()

    def match_trajectories(self, segments=None):
        r"""For a system that is an explicit ODE :math:`f' = F(t, f; \theta)`
        (:func:`~pyro_pidkl.physics.ode.explicit_ode`; other systems are left as they are),
        fit the learned coefficients and every output's initial state to the data by
        multiple, then single shooting, from a design of starts around the user's
        coefficients and the current ones (:meth:`match_gradients` gives them), the initial
        states of outputs nobody measured searched too
        (:func:`~pyro_pidkl.models.system_starts.shoot_from_many_starts`; with
        ``multistart=0``, or ``segments`` given, from the current coefficients and jets
        alone: :func:`~pyro_pidkl.infer.shooting.fit_by_shooting`). Where that ends below
        where it started, the coefficients are set, and so is the linearisation point: the
        integrated trajectory's values and derivatives at Z (and an unobserved output's
        prior centre at the trajectory's mean). Gradient
        matching alone lets the scale of an output nobody measured trade off against the
        coefficients that multiply it (SIR's susceptibles): a trajectory of the ODE cannot.

        :returns: the :class:`~pyro_pidkl.infer.shooting.ShootingResult`, or ``None`` when
            the system is not an explicit ODE, nothing is observed, or a learned coefficient
            is not a scalar."""
        from ..infer.shooting import fit_by_shooting
        ode = self.ode
        if ode is None or not sum(self.counts) or any(
                getattr(owner, p + "_unconstrained").numel() != 1
                for _, owner, p in self._coefficients()):
            return None
        coefficients = [(n, torch.distributions.transform_to(self.system.specs[n].constraint),
                         float(getattr(owner, p + "_unconstrained").detach()))
                        for n, owner, p in self._coefficients()]
        with torch.no_grad():
            jets = self.f0 if bool(self.f0_set) else self._data_jet()
            t_all = torch.cat([X[:, 0] for X in self.X_by_output])
            t0 = min(float(self.domain.low[0]), float(t_all.min()))
            t1 = float(t_all.max())
            x0 = jets[:, 0, int((self.Z[:, 0] - t0).abs().argmin())].numpy()
            scale = self.y_scale.numpy()
            sd = np.maximum((self.y_scale * self.noises().sqrt()).numpy(), 0.05 * scale)
        observations = [(X[:, 0].numpy(), y.numpy())
                        for X, y in zip(self.X_by_output, self.y_by_output)]
        # the same start gives the same fit (deterministic): a fit's second start, which
        # begins where the first did, reuses it
        key = (tuple(c[2] for c in coefficients), x0.tobytes(), sd.tobytes(), segments)
        if self._shot is not None and self._shot[0] == key:
            result = self._shot[1]
        else:
            if self.multistart > 1 and segments is None:
                result = shoot_from_many_starts(self, coefficients, x0, jets, t0, t1,
                                                observations, scale, sd, self.multistart)
            else:
                result = fit_by_shooting(ode, observations, coefficients, x0, t0, t1, scale,
                                         sd, segments=segments)
            self._shot = (key, result)
        if not result.improved:
            return result
        self._apply_shooting(result, t0)
        return result

    def _apply_shooting(self, result, t0, theta=None):
        """Set the coefficients (``theta``, unconstrained; default the shooting's) and the
        linearisation point and GP priors from the trajectory of a shooting ``result``
        started at ``t0``."""
        ode = self.ode
        theta = result.theta if theta is None else theta
        with torch.no_grad():
            for (_, owner, p), v in zip(self._coefficients(), theta):
                getattr(owner, p + "_unconstrained").fill_(float(v))
            times, inverse = torch.unique(self.Z[:, 0], return_inverse=True)
            grid = np.unique(np.r_[times.numpy(), t0])
            traj = ode.integrate(t0, torch.as_tensor(result.x0)[None], grid)
            if traj is not None:
                at = np.searchsorted(grid, times.numpy())
                values = torch.as_tensor(traj[0][:, at].T)              # (times, C)
                slopes = ode.rhs(times, values)
                f0 = self.f0.new_zeros(self.f0.shape)
                for k, idx in enumerate(self.indices):
                    f0[:, k] = (values if idx == () else slopes).T[:, inverse]
                self.f0.copy_(f0)
                self.f0_set.fill_(True)
                self._priors_from_trajectory(values[inverse], result.sd)
        self._cache = None

    def _priors_from_trajectory(self, values, sd):
        r"""Each GP's prior set to hold a trajectory ``values`` ``(M, C)`` at Z: its
        lengthscale from an SE-ARD fit to the trajectory alone, its variance the
        trajectory's spread, an unobserved output's centre its mean, and each learned noise
        the shooting's noise scale ``sd`` ``(C,)``. Held tightly, the equations leave the
        GPs no room to adapt their own parameters: FitzHugh-Nagumo's voltage, whose data-
        only fit interpolates it (lengthscale at its floor, noise 0.0008 of the signal's),
        kept Gauss-Newton from converging at every step of a tight fit."""
        floor = math.exp(self._log_lengthscale_floor())
        keep = maximin_subset(self.Z_s, min(self.Z.shape[0], 100 * self.input_dim))
        for c, kern in enumerate(self.kernels):
            g = (values[:, c] - self.y_loc[c]) / self.y_scale[c]
            level = g.mean()
            found = fit_data_only(self.Z_s[keep], (g - level)[keep], noise_floor=1e-8)
            if found is not None:
                _set(kern, "lengthscale", found.lengthscale.clamp(min=1.01 * floor, max=20.0))
            _set(kern, "variance", (g - level).pow(2).mean().clamp(min=1e-6))
            if c in self.mean_learned:
                self.mean_unobserved_unconstrained[self.mean_learned.index(c)] = level
            if c in self.noise_learned:
                j = self.noise_learned.index(c)
                noise = self.noise.detach().clone()
                noise[j] = (float(sd[c]) / self.y_scale[c]) ** 2
                _set(self, "noise", noise)

    def parameter_bounds(self):
        """Lengthscales stay above half the spacing of the points (as
        :meth:`PhysicsConditionedGP.parameter_bounds`); an observed output's prior variance
        between :data:`MIN_VARIANCE` and :data:`MAX_VARIANCE` of its data's; an unobserved
        output's is held where its scale (``scales``, or the shooting stage's trajectory)
        puts it: no datum says how large its prior should be, and the marginal likelihood,
        free to choose, shrank the README spring's velocity to 0.01 (its fit then missed
        the velocity by 1.4 at the start)."""
        low = self._log_lengthscale_floor()
        out = {k.lengthscale_unconstrained: (low, None) for k in self.kernels}
        if getattr(self, "_hold_coefficients", False):       # keep_best_stage holds them
            for _, owner, p in self._coefficients():
                u = getattr(owner, p + "_unconstrained")
                out[u] = (float(u.detach()), float(u.detach()))
        for c, k in enumerate(self.kernels):
            if self.counts[c]:
                out[k.variance_unconstrained] = (math.log(MIN_VARIANCE),
                                                 math.log(MAX_VARIANCE))
            else:               # no data: held where its scale (or its trajectory) puts it
                u = float(k.variance_unconstrained.detach())
                out[k.variance_unconstrained] = (u, u)
        return out

    def _log_lengthscale_floor(self):
        """The log of half the points' spacing in standardised units (the lengthscales'
        lower bound)."""
        n = sum(self.counts) + self.Z.shape[0]
        return math.log(0.5 * math.sqrt(12.0) / n ** (1.0 / self.input_dim))

    # -- the joint Gaussian ----------------------------------------------------------------
    def operators(self, twice_differentiable=False):
        """Per output, its kernel's operator covariances Z-Z and Z-X_c."""
        return [(OperatorCovariance(k, self.Z_s, self.Z_s, twice_differentiable),
                 OperatorCovariance(k, self.Z_s, U, twice_differentiable))
                for k, U in zip(self.kernels, self.X_s)]

    def linearise(self, f0):
        r"""The system at Z linearised around the jets ``f0`` ``(C, len(indices), M)`` (user
        units) and written for the standardised :math:`g_c`: ``(w, b)`` with ``w``
        ``{(e, c): {alpha: (M,)}}`` and ``b`` ``(E, M)``, the constant part (the outputs'
        means included)."""
        lin = linearise_system(self.system, [{i: f0[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               self.Z, self.input_names)
        levels = self.y_loc + self.y_scale * self.mean
        w, b = {}, list(lin.offset)
        for (e, c), coef in lin.coefficients.items():
            w[(e, c)] = {i: v * self.y_scale[c] / torch.prod(self.x_scale[list(i)])
                         for i, v in coef.items()}
            if () in coef:
                b[e] = b[e] + coef[()] * levels[c]
        return w, torch.stack(b)

    def joint(self, w, b, closed_form=True, operators=None):
        r"""The joint Gaussian of :math:`[v_1; \dots; v_E; y_1; \dots; y_C]` (module
        docstring)."""
        E, C, M = self.num_equations, len(self.outputs), self.Z.shape[0]
        ops = operators or self.operators(twice_differentiable=not closed_form)
        rows = []
        for e1 in range(E):
            row = []
            for e2 in range(E):
                if e2 < e1:
                    row.append(None)
                    continue
                block = 0.0
                for c in range(C):
                    wa, wb = w.get((e1, c)), w.get((e2, c))
                    if wa is not None and wb is not None:
                        block = block + ops[c][0](wa, wb, symmetric=(e1 == e2))
                row.append(block if torch.is_tensor(block) else self.Z.new_zeros(M, M))
            rows.append(row)
        for e1 in range(E):
            for e2 in range(e1):
                rows[e1][e2] = rows[e2][e1].T
        K_vv = torch.cat([torch.cat(r, 1) for r in rows], 0)
        prior_var = K_vv.diagonal()
        K_vv = K_vv + torch.diag(self.residual_noise * prior_var)
        noises = self.noises()
        cross, data = [], []
        for c in range(C):
            n = self.counts[c]
            if not n:
                continue
            col = [ops[c][1](w[(e, c)], {(): 1.0}) if (e, c) in w else self.Z.new_zeros(M, n)
                   for e in range(E)]
            cross.append(torch.cat(col, 0))
            data.append(self.kernels[c](self.X_s[c])
                        + noises[c] * torch.eye(
                            n, dtype=K_vv.dtype, device=K_vv.device))
        K_vy = torch.cat(cross, 1)
        K_yy = torch.block_diag(*data)
        A = torch.cat([torch.cat([K_vv, K_vy], 1), torch.cat([K_vy.T, K_yy], 1)], 0)
        obs = torch.cat([-b.reshape(-1)] + [self.y_s[c] - self.mean[c]
                                            for c in range(C) if self.counts[c]])
        joint = JointGaussian(A, obs, E * M, closed_form=closed_form)
        joint.w, joint.operators = w, ops
        return joint

    def _objective(self, joint):
        if self.objective == "conditional":
            value = joint.log_prob_data_given_virtual()
        else:
            value = joint.log_prob()
        return value + self.log_prior()

    @pyro_method
    def model(self):
        # psi_e[f](Z) ~= b_e(Z) + sum_{c,a} w_{e,c,a}(Z) d^a g_c(Z): the system linearised
        # around f0, the posterior means' jets of the last Gauss-Newton step
        w, b = self.linearise(self.f0)
        # [v; y_1..y_C] ~ N(0, A): each equation's residual observed at 0 at Z, each output's
        # data with its own noise; the outputs are independent a priori
        joint = self.joint(w, b)
        # log p(y | v): the data under the GPs conditioned on the system
        pyro.factor("data", self._objective(joint))
        return joint

    @pyro_method
    def guide(self):
        """No latent sites: kernels, means, noises and coefficients are point estimates."""

    # -- Gauss-Newton ------------------------------------------------------------------------
    def _offsets(self, joint):
        """Where each output's data sit in the joint's rows: ``{c: slice}``."""
        start, out = joint.M, {}
        for c, n in enumerate(self.counts):
            out[c] = slice(start, start + n)
            start += n
        return out

    def _cross(self, joint, c, U, index=(), operators=None):
        r"""Covariances ``(P, E M + N)`` of :math:`\partial^{index} g_c(U)` with the joint's
        rows."""
        E, M = self.num_equations, self.Z.shape[0]
        UZ, UX = operators or (OperatorCovariance(self.kernels[c], U, self.Z_s),
                               OperatorCovariance(self.kernels[c], U, self.X_s[c]))
        parts = [UZ({index: 1.0}, joint.w[(e, c)]) if (e, c) in joint.w
                 else U.new_zeros(U.shape[0], M) for e in range(E)]
        for c2, n in enumerate(self.counts):
            if n:
                parts.append(UX({index: 1.0}, {(): 1.0}) if c2 == c
                             else U.new_zeros(U.shape[0], n))
        return torch.cat(parts, 1)

    def _jet_scales(self, c):
        r""":math:`s_{y,c} / \prod_{a \in \alpha} s_{x,a}` for each derivative in
        ``indices`` ``(len(indices),)``: a standardised jet of :math:`g_c` times these is
        the user-unit jet of :math:`f_c` but for its level."""
        return torch.stack([self.y_scale[c] / torch.prod(self.x_scale[list(i)])
                            for i in self.indices])

    def _user_jet(self, c, g):
        r"""The user-unit jet of :math:`f_c` ``(len(indices), M)`` from the standardised
        jet ``g`` of :math:`g_c` (``indices`` start with the value ``()``)."""
        out = g * self._jet_scales(c)[:, None]
        out[0] = out[0] + self.y_loc[c] + self.y_scale[c] * self.mean[c]
        return out

    def _mean_jet(self, joint):
        """The posterior means' jets at Z in user units ``(C, len(indices), M)``."""
        alpha = joint.weights()
        E, M = self.num_equations, self.Z.shape[0]
        where = self._offsets(joint)
        out = []
        for c in range(len(self.outputs)):
            ZZ, ZX = joint.operators[c]
            g = alpha.new_zeros(len(self.indices), M)
            for k, idx in enumerate(self.indices):
                for e in range(E):
                    if (e, c) in joint.w:
                        g[k] += ZZ.matvec({idx: 1.0}, joint.w[(e, c)], alpha[e * M:(e + 1) * M])
                if self.counts[c]:
                    g[k] += ZX.matvec({idx: 1.0}, {(): 1.0}, alpha[where[c]])
            out.append(self._user_jet(c, g))
        return torch.stack(out)

    def _data_jet(self):
        """Where Gauss-Newton starts: each observed output's data-only GP mean (its jet at
        Z), an unobserved output's prior mean."""
        out = []
        for c in range(len(self.outputs)):
            g = self.Z.new_zeros(len(self.indices), self.Z.shape[0])
            if self.counts[c]:
                kern, U = self.kernels[c], self.X_s[c]
                K = kern(U) + (self.noises()[c] + 1e-8) * torch.eye(U.shape[0], dtype=U.dtype)
                alpha = torch.cholesky_solve((self.y_s[c] - self.mean[c])[:, None],
                                             torch.linalg.cholesky(K))[:, 0]
                ZX = OperatorCovariance(kern, self.Z_s, U)
                for k, idx in enumerate(self.indices):
                    g[k] = ZX.matvec({idx: 1.0}, {(): 1.0}, alpha)
            out.append(self._user_jet(c, g))
        return torch.stack(out)

    def _residual_size(self, f0):
        lin = linearise_system(self.system, [{i: f0[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               self.Z, self.input_names)
        return float(lin.h0.detach().norm())

    # -- adequacy (LinearisedConditioning.adequacy) -------------------------------------------
    def _residual_parts(self, jet):
        r"""``{equation: (Z, residual, size)}``: each equation's residual at Z and the size
        of its terms, at the posterior means' jets ``jet`` ``(C, len(indices), M)`` (as
        :func:`~pyro_pidkl.physics.linearise.residual_parts`)."""
        lin = linearise_system(self.system, [{i: jet[c, k] for k, i in enumerate(self.indices)}
                                             for c in range(len(self.outputs))],
                               self.Z, self.input_names)
        out = {}
        for e in range(self.num_equations):
            size = torch.zeros_like(lin.h0[e])
            for (e2, c), coef in lin.coefficients.items():
                if e2 == e:
                    for k, idx in enumerate(self.indices):
                        if idx in coef:
                            size = size + (coef[idx] * jet[c, k]).detach().pow(2)
            name = f"equation {e + 1} of system {self.system.name!r}"
            out[name] = (self.Z, lin.h0[e].detach(), size.sqrt())
        return out

    def _log_evidence_ratio(self):
        r""":math:`\log p(y \mid v) - \sum_c \log p(y_c)`: the fit's data density given
        the system against the best SE-ARD GP of each observed output's data alone
        (:func:`~pyro_pidkl.gp.data_fit.fit_data_only`, several starts)."""
        from .conditioned import REFERENCE_LENGTHSCALES
        if sum(self.counts) < 3:
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

    def _trajectory_misfit(self):
        r"""An explicit ODE's own trajectory, integrated from the posterior means at the
        first time (the domain's start or the first datum) with the fitted coefficients:
        ``{output: RMS(y - trajectory) / spread of y}`` per observed output (``{}`` when the
        system is not an explicit ODE or the integration fails)."""
        if self.ode is None or not sum(self.counts):
            return {}
        t_all = torch.cat([X[:, 0] for X in self.X_by_output])
        t0 = min(float(self.domain.low[0]), float(t_all.min()))
        start, _ = self.forward(torch.tensor([[t0]], dtype=self.Z.dtype))
        grid = np.unique(np.r_[t0, t_all.numpy()])
        if grid[-1] <= t0:                  # every datum at the first time: nothing to follow
            return {}
        traj = self.ode.integrate(t0, start, grid)
        if traj is None:
            return {}
        out = {}
        for c, o in enumerate(self.outputs):
            if self.counts[c]:
                t, y = self.X_by_output[c][:, 0].numpy(), self.y_by_output[c].numpy()
                path = traj[0][c][np.searchsorted(grid, t)]
                out[o] = float(np.sqrt(np.mean((np.asarray(path) - y) ** 2))
                               / float(self.y_scale[c]))
        return out

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
            points = self._sigma_points()
            names, theta, eta = self._laplace_parameters(True)
            means, variances = [], []
            for c, kern in enumerate(self.kernels):
                cross = self._cross(joint, c, U)
                mean = joint.mean(cross) + self.mean[c]
                var = joint.variance(cross, kern(U, diag=True))
                for pair in points:
                    ms = []
                    for values, at in pair:
                        with parameters_at(theta + eta, values):
                            ms.append(at.mean(self._cross(at, c, U)) + self.mean[c])
                    var = var + (0.5 * (ms[0] - ms[1])).pow(2)
                if not noiseless:
                    var = var + self.noises()[c]
                means.append(self.y_loc[c] + self.y_scale[c] * mean)
                variances.append(self.y_scale[c] ** 2 * var)
            return torch.stack(means, 1), torch.stack(variances, 1)

    # -- Laplace -------------------------------------------------------------------------------
    def _nuisance_parameters(self):
        """The GPs' own parameters (lengthscales, variances, noises, unobserved means)."""
        return [p for name, p in self.named_parameters()
                if not name.startswith("system.") and p.requires_grad]
