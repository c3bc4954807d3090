r"""An explicit ODE, or a system of them, in time conditioned on its data in :math:`O(N)`:
the probabilistic solver's likelihood (:mod:`~pyro_pidkl.statespace.ode_filter`) as a Pyro
model, fitted in seconds, with Laplace intervals and predictions that carry both the
solver's error and the coefficients' uncertainty.

It takes what :class:`~pyro_pidkl.models.ConditionedSystemGP` takes (an
:class:`~pyro_pidkl.physics.EquationSystem` and ``{output: (t, y)}``, outputs nobody
measured left out) or an :class:`~pyro_pidkl.physics.Equation` of any order with ``(t, y)``,
where the system is an explicit ODE in one input (``f' = F(t, f)``, or the highest
derivative entering linearly) and the data are Gaussian. Its prior is a Markov process, so
a fit costs :math:`O(N)` in the nodes where the dense conditioned GP costs
:math:`O((N + M)^3)`; with the calibrated diffusion its likelihood is the exact ODE's up to
the solver's error, folded in as uncertainty.
"""

import math
import time
import warnings

import numpy as np
import pyro
import torch
from pyro.nn import PyroModule, pyro_method

from ..physics.equation import Equation
from ..physics.observations import output_scales, split_by_output
from ..physics.ode import explicit_ode
from ..physics.scalar_ode import equation_ode
from ..physics.system import EquationSystem
from .adequacy import noise_rejected, warn_noise
from .fit import fit_ode_filter, laplace, smoothed_values
from .ode_filter import ODEFilter
from .prediction import parameter_variance
from .search import SEARCH_DATA, thin

__all__ = ["StateSpaceGP"]

#: uniform nodes of the loose stage's filter, besides the data's times
COARSE_NODES = 24

#: a positive coefficient more than this many times below the user's value has run to zero
#: (the search's design spans a thousand either way): its Laplace curvature is taken in the
#: rate, not its log (:meth:`StateSpaceGP._at_zero`)
AT_ZERO = 1e6


class StateSpaceGP(PyroModule):
    r"""An explicit ODE's coefficients, initial state and noise from its data by a
    probabilistic solver (module docstring).

    :param equation: an :class:`~pyro_pidkl.physics.EquationSystem` or an
        :class:`~pyro_pidkl.physics.Equation`, in one input.
    :param data: ``{output: (t, y)}`` for a system (outputs left out are never measured) or
        its wide form ``(t, Y)`` (``NaN`` where not measured;
        :func:`~pyro_pidkl.physics.observations.split_by_output`); ``(t, y)`` for an
        equation. ``t`` ``(n,)`` or ``(n, 1)``.
    :param domain: a :class:`~pyro_pidkl.physics.Box` over the input: the span solved on
        (default: the data's).
    :param int nodes: uniform nodes over the span, besides the data's times (default
        ``max(100, 2 n)``, at most 4000).
    :param int order: the prior's order :math:`q` (each output's state holds :math:`q`
        derivatives; 3 by default: in a trial on seed 15's problem 4 of
        ``benchmarks/random_odes.py``, a forced oscillator at 100 nodes, order 2 put the
        damping 8% below the exact fit's, order 3 within 0.2%).
    :param dict known: ``{output: value}``: initial values known at the span's start (held).
    :param dict scales: ``{output: size}`` or ``{output: (loc, size)}``: a component's
        typical size (default: its data's spread; 1 for one nobody measured) and, for one
        nobody measured, where its initial value is guessed to be (default 0), as
        :class:`~pyro_pidkl.models.ConditionedSystemGP`'s ``scales``.
    :param int starts: starts of the search over the coefficients (:meth:`search`; default
        64 per searched dimension, 64 to 512; ``0``: none, the user's values alone).
    :param floors: the tempering stages from the user's values (diffusion floors as
        multiples of the calibrated one, :func:`~pyro_pidkl.statespace.fit.fit_ode_filter`).
    """

    deterministic = True
    #: predictions carry the parameters' Laplace share by default (:meth:`forward`)
    parameter_uncertainty = True
    fits_itself = True      # pk.fit calls fit(): L-BFGS-B stages, the linearisation refreshed
    samples_itself = True   # pk.infer.sample_coefficients calls sample(): NUTS on its likelihood

    def __init__(self, equation, data, domain=None, nodes=None, order=3, known=None,
                 scales=None, starts=None, floors=(1e4, 1e2, 1.0)):
        super().__init__()
        self.starts, self.floors = starts, tuple(floors)
        if isinstance(equation, EquationSystem):
            if len(equation.inputs) != 1:
                raise ValueError(f"Expected a system in one input (time); got inputs "
                                 f"{equation.inputs}")
            ode = explicit_ode(equation)
            self.outputs, self.components = tuple(equation.outputs), tuple(equation.outputs)
        elif isinstance(equation, Equation):
            if len(equation.inputs) != 1:
                raise ValueError(f"Expected an equation in one input (time); got inputs "
                                 f"{equation.inputs}")
            ode = equation_ode(equation, equation.inputs)
            if ode is not None:
                self.outputs, self.components = ("f",), ode.outputs
            if not (isinstance(data, (tuple, list)) and len(data) == 2):
                raise TypeError(f"Expected data as (t, y) for an equation; got "
                                f"{type(data).__name__}")
            data = {"f": data}
        else:
            raise TypeError(f"Expected an Equation or an EquationSystem; got "
                            f"{type(equation).__name__}")
        if ode is None:
            raise ValueError(f"Expected an explicit ODE (f' = F(t, f), or the highest "
                             f"derivative entering linearly) for the state-space solver; "
                             f"{equation.name!r} is not one")
        self.equation, self.ode = equation, ode
        # the outputs' data (long or wide form) and sizes, as every model reads them
        parts, _ = split_by_output(data, self.outputs, equation.inputs)
        observations = []
        for X, y in parts + [(torch.zeros(0, 1), torch.zeros(0))] * (
                len(self.components) - len(self.outputs)):
            order_ = torch.argsort(X[:, 0])
            observations.append((X[order_, 0].numpy(), y[order_].numpy()))
        given = dict(scales or {})
        locs, sizes = output_scales([y for _, y in observations], self.components, given)
        # a single equation's derivatives nobody measured: the output's size
        if not isinstance(equation, EquationSystem):
            sizes[1:] = [sizes[0] if name not in given else size
                         for name, size in zip(self.components[1:], sizes[1:])]
        # where the initial value of a component nobody measured is guessed to be
        self.guesses = {c: locs[c] for c in range(len(self.components))
                        if not len(observations[c][0])}
        times = np.concatenate([o[0] for o in observations])
        if not len(times):
            raise ValueError("Expected data for at least one output")
        t0, t1 = float(times.min()), float(times.max())
        if domain is not None:
            box = domain.resolve(torch.as_tensor(times)[:, None], equation.inputs)
            t0, t1 = min(t0, float(box.low[0])), max(t1, float(box.high[0]))
        self.observations, self.t0, self.t1 = observations, t0, t1
        self.specs = {n: s for n, s in equation.specs.items() if not s.fixed}
        transforms = [(n, torch.distributions.transform_to(s.constraint))
                      for n, s in self.specs.items()]
        if nodes is None:
            nodes = int(min(4000, max(100, 2 * len(times))))
        self.filter = ODEFilter(ode, observations, transforms, t0, t1, sizes, nodes=nodes,
                                q=order)
        # the loose stage's filter: the data's times and a few nodes between (a rough fit
        # that only needs the basin)
        self.thinned = [thin(t, y, SEARCH_DATA) for t, y in observations]
        self.coarse = ODEFilter(ode, self.thinned, transforms, t0, t1, sizes,
                                nodes=min(nodes, COARSE_NODES), q=min(order, 2))
        self.known = {self.components.index(k): float(v) for k, v in (known or {}).items()}
        self.result = None
        self._out = None

    # -- the fit ---------------------------------------------------------------------------
    def _start(self, filt=None):
        filt = filt or self.filter
        theta = [float(t.inv(getattr(self.equation, n).detach()))
                 for n, t in filt.transforms]
        u0, u_star = [], torch.zeros(len(filt.t), filt.C, dtype=torch.float64)
        for c, (t, y) in enumerate(self.observations):
            s = float(filt.scale[c])
            if c in self.known:
                u0.append(self.known[c] / s)
            elif len(t):
                u0.append(float(np.interp(self.t0, t, y)) / s)
            else:
                u0.append(self.guesses.get(c, 0.0) / s)
            if len(t):
                u_star[:, c] = torch.as_tensor(np.interp(filt.t.numpy(), t, y) / s)
        log_sd = [math.log(0.1) for _ in filt.measured]
        return np.array(theta + u0 + log_sd), u_star

    def search(self, loose=None):
        """The exact ODE's search over starts (:func:`~pyro_pidkl.statespace.search.search`):
        ``(theta (S', P), x0 (S', C), cost (S',))``, best first."""
        from .search import search
        return search(self, loose)

    def fit(self):
        """Fit (module docstring of :mod:`~pyro_pidkl.statespace.fit`): the loose stage of
        the tempering from the user's values on a coarse grid (the trajectory follows the
        data), the search over starts from its answer (:meth:`search`, where coefficients
        are learned), then the solver's likelihood at its calibrated diffusion maximised
        from the search's best, linearised first around that start's exact trajectory; the
        coefficients are set on the equation. Returns a
        :class:`~pyro_pidkl.statespace.fit.FilterFit`."""
        v0, u_star = self._start()
        P, C = self.filter.P, self.filter.C
        bounds = [(None, None)] * len(v0)
        for c, value in self.known.items():
            bounds[P + c] = (v0[P + c], v0[P + c])
        start, loose = v0, None
        clock = {"began": time.perf_counter()}
        if self.floors:
            try:
                loose = fit_ode_filter(self.coarse, v0, self._start(self.coarse)[1],
                                       floors=self.floors[:1], bounds=bounds, final=False,
                                       relinearise=2, max_iter=60)
                start = loose.v
            except (RuntimeError, ValueError):
                loose = None
        clock["loose"] = time.perf_counter()
        if P and self.starts != 0:
            # the search includes the loose answer as its first start: its best trajectory
            # of the exact ODE is where the solver's likelihood is refined
            theta, x0, cost = self.search(loose)
            if np.isfinite(cost[0]):
                start = v0.copy()
                start[:P] = theta[0]
                start[P:P + C] = x0[0] / self.filter.scale.numpy()
                u_star = self._trajectory(start, u_star)
                start[P + C:] = self._residual_log_sd(u_star, start[P + C:])
        clock["search"] = time.perf_counter()
        best = None
        try:
            best = fit_ode_filter(self.filter, start, u_star, floors=(), bounds=bounds,
                                  relinearise=3, max_iter=100)
        except (RuntimeError, ValueError):
            pass
        if best is None:
            raise RuntimeError("The state-space fit failed from every start")
        clock["refine"] = time.perf_counter()
        self.result = laplace(self.filter, best, self._at_zero(best.v))
        self.result.stages.append({
            "loose_seconds": clock["loose"] - clock["began"],
            "loose_evaluations": loose.evaluations if loose is not None else 0,
            "search_seconds": clock["search"] - clock["loose"],
            "refine_seconds": clock["refine"] - clock["search"],
            "refine_evaluations": best.evaluations})
        self.result.seconds = time.perf_counter() - clock["began"]
        judged = self.adequacy()
        self.result.stages.append({"adequacy": judged})
        warn_noise(judged)
        if judged is not None and not judged["agree"]:
            from ..diagnostics.adequacy import ModelMisfitWarning
            how = (f"explains the data {-judged['evidence_ratio']:.0f} nats worse than a "
                   f"smooth GP of the data alone" if judged["evidence_ratio"] is not None else
                   f"misses the data by {judged['noise_ratio']:.1f} times their own noise")
            warnings.warn(
                f"The ODE's exact trajectory at the fit {how}: the data contradict the ODE, "
                f"or the fit ended in a wrong optimum (model.adequacy()); its intervals do "
                f"not hold",
                ModelMisfitWarning)
        for c in self.known:                        # a held value has no variance
            self.result.cov[P + c, :] = 0.0
            self.result.cov[:, P + c] = 0.0
        # the noise is fitted with the rest (its maximum-likelihood value, low by the
        # parameters' share): the covariance is scaled by n / (n - p), as the textbook's
        # unbiased noise estimate scales the exact fit's
        n = sum(len(t) for t, _ in self.observations)
        p = P + C - len(self.known)
        if n > p:
            self.result.cov = self.result.cov * (n / (n - p))
        self._set_coefficients()
        self._out = None
        return self.result

    def _at_zero(self, v):
        """Indices of positive (or bounded below) coefficients run to their bound: more
        than :data:`AT_ZERO` times below the user's value in :math:`e^v` (far outside the search's design, a thousand either way),
        whose Laplace curvature is taken in the rate itself
        (:func:`~pyro_pidkl.statespace.fit.laplace`)."""
        start = self._start()[0]
        bounded = type(torch.distributions.constraints.positive)     # greater_than(a)
        return [k for k, (name, _) in enumerate(self.filter.transforms)
                if isinstance(self.specs[name].constraint, bounded)
                and v[k] < start[k] - math.log(AT_ZERO)]

    def _set_coefficients(self):
        """The equation's coefficients set from the fit's :math:`v`."""
        with torch.no_grad():
            theta = torch.as_tensor(self.result.v[:self.filter.P])
            for (n, t), u in zip(self.filter.transforms, theta):
                setattr(self.equation, n, t(u).clone())

    def sample(self, num_warmup=500, num_samples=500, num_chains=2, seed=0, progress=True):
        """NUTS over the coefficients, the initial state and the noise on the solver's
        likelihood (:func:`~pyro_pidkl.statespace.sampling.sample`; also
        ``pk.infer.sample_coefficients(model)``): a
        :class:`~pyro_pidkl.infer.coefficient_samples.CoefficientSamples`."""
        from .sampling import sample
        return sample(self, num_warmup, num_samples, num_chains, seed, progress)

    def _residual_log_sd(self, u_star, fallback):
        """Each measured output's log noise scale (solver units) from the data's residuals
        about the trajectory ``u_star`` at the nodes: where the refinement starts."""
        filt = self.filter
        out = []
        for k, c in enumerate(filt.measured):
            r = (filt.y[:, c] - u_star[:, c])[filt.seen[:, c]]
            sd = float(r.pow(2).mean().sqrt()) if len(r) else 0.0
            out.append(math.log(sd) if sd > 0 and math.isfinite(sd) else fallback[k])
        return np.array(out)

    def _trajectory(self, v, fallback):
        """The exact ODE's trajectory from ``v``'s coefficients and initial state at the
        nodes ``(N, C)`` (solver units): the first linearisation point of the refinement
        (``fallback`` where the integration fails)."""
        filt = self.filter
        P, C = filt.P, filt.C
        values = {n: t(torch.tensor(float(v[k]), dtype=torch.float64))
                  for k, (n, t) in enumerate(filt.transforms)}
        x0 = torch.as_tensor(v[P:P + C] * filt.scale.numpy())[None]
        traj = self.ode.integrate(self.t0, x0, filt.t.numpy(), values, max_evaluations=20000)
        if traj is None:
            return fallback
        return torch.as_tensor(traj[0].T) / filt.scale

    def adequacy(self, most=None):
        """Whether the data and the ODE agree (:func:`~pyro_pidkl.statespace.adequacy.adequacy`)."""
        from .adequacy import EVIDENCE_DATA, adequacy
        return adequacy(self, EVIDENCE_DATA if most is None else most)

    def _smoothed(self):
        if self._out is None:
            _, self._out = smoothed_values(self.filter, self.result.v, self.result.u_star)
        return self._out

    @pyro_method
    def model(self):
        r""":math:`\log p(y \mid o = 0)`, the data given the ODE at every node, as one
        factor (the coefficients, the initial state and the noise are the fit's
        parameters)."""
        v = torch.as_tensor(self.result.v if self.result is not None else self._start()[0])
        u_star = self.result.u_star if self.result is not None else self._start()[1]
        out = self.filter.evidence(v, u_star)
        pyro.factor("data", out["log_evidence"])
        return out

    def guide(self):
        pass

    # -- what it found -----------------------------------------------------------------------
    def equation_parameters(self):
        """Current coefficients ``{name: float}``."""
        return {n: float(getattr(self.equation, n).detach())
                for n in self.equation.parameter_names}

    def initial_state(self):
        """The fitted initial state ``{component: value}`` at the span's start."""
        P = self.filter.P
        return {o: float(self.result.v[P + c] * self.filter.scale[c])
                for c, o in enumerate(self.components)}

    def noise_sd(self):
        """Each measured output's fitted noise standard deviation ``{output: sd}``."""
        P, C = self.filter.P, self.filter.C
        return {self.components[c]: float(math.exp(self.result.v[P + C + k])
                                          * self.filter.scale[c])
                for k, c in enumerate(self.filter.measured)}

    def coefficient_intervals(self, prob=0.9):
        r"""Central ``prob`` intervals ``{name: {"value", "lower", "upper", "sd",
        "identified"}}`` from the Laplace covariance, the normal interval in each
        coefficient's unconstrained space mapped through its constraint (as the conditioned
        GPs'); ``identified`` where the unconstrained standard deviation is finite and below
        1. A rate run to zero (:meth:`_at_zero`) gets ``[0, k + z sd_k]`` from the
        curvature in the rate itself, unidentified, and the others' intervals carry its
        trade-off with them. Where the data reject constant noise
        (:func:`~.adequacy.noise_check`) none is identified (``"noise": "rejected"``)."""
        from ..infer.exact_fit import normal_intervals
        P = self.filter.P
        var = np.diag(self.result.cov)[:P]
        sd = np.where(np.isfinite(var) & (var >= 0), np.sqrt(np.abs(var)), np.inf)
        names = [n for n, _ in self.filter.transforms]
        out = normal_intervals(names, [t for _, t in self.filter.transforms],
                               self.result.v[:P], sd, sd < 1.0, prob)
        # a rate run to zero: its variance is the rate's own (fit.laplace), its interval
        # one-sided from zero, and it is not identified (the data allow it to vanish)
        z = float(torch.distributions.Normal(0.0, 1.0).icdf(
            torch.tensor(0.5 + prob / 2, dtype=torch.float64)))
        for j in getattr(self.result, "boundary", []):
            low = float(self.specs[names[j]].constraint.lower_bound)
            out[names[j]].update(lower=low, upper=out[names[j]]["value"] + z * sd[j],
                                 sd=float(sd[j]), identified=False)
        for n in out if noise_rejected(self) else ():      # a noise the data reject
            out[n].update(identified=False, noise="rejected")
        return out

    def forward(self, t_new, parameter_uncertainty=None):
        r"""Posterior means and variances of the outputs at times ``t_new`` ``(T,)`` or
        ``(T, 1)``, in the user's units: ``(T, C)`` each for a system, ``(T,)`` for an
        equation. The variance is the solver's (the ODE's trajectory given the data and the
        fitted coefficients) plus, with ``parameter_uncertainty`` (default: the model's
        attribute, on), the Laplace uncertainty of the coefficients, initial state and
        noise by the delta method (finite differences of the mean)."""
        if self.result is None:
            raise RuntimeError("Expected a fitted model: call pk.fit(model) first")
        t_new = torch.as_tensor(t_new, dtype=torch.float64).reshape(-1)
        filt = self.filter
        E0 = filt.E0
        m, P = filt.predict(self._smoothed(), t_new)
        mean = (E0 @ m[..., None])[..., 0] * filt.scale
        var = torch.diagonal(E0 @ P @ E0.T, dim1=-2, dim2=-1) * filt.scale ** 2
        if self.parameter_uncertainty if parameter_uncertainty is None else \
                parameter_uncertainty:
            var = var + parameter_variance(self, t_new)
        keep = [self.components.index(o) for o in self.outputs]
        mean, var = mean[:, keep], var[:, keep]
        if len(self.outputs) == 1 and not isinstance(self.equation, EquationSystem):
            return mean[:, 0], var[:, 0]
        return mean, var
