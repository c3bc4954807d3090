r"""A population of groups that share one law: an explicit ODE
:math:`x' = F(t, x; \theta_i)` whose coefficients (and unknown initial states) vary over the
groups as :mod:`~pyro_pidkl.population.effects` declares, each group measured at its own
times.

Each group's unconstrained coefficients are linear in the fixed effects :math:`\beta` and
its random effects :math:`\eta_i`,

.. math:: \phi_i = A_i \beta + B \eta_i, \qquad \eta_i \sim \mathcal N(0, \Omega), \qquad
    z_{ij} = g\big(x_{c_j}(t_{ij}; T(\phi_i))\big) + \sigma_{c_j} \epsilon_{ij},

with :math:`A_i` ``(P, p)`` the design (ones, covariates, a group's own column),
:math:`B` ``(P, q)`` the random effects' columns, :math:`g` the identity (additive noise)
or the log (``noise="log"``: log-normal, a constant coefficient of variation) and
:math:`z = g(y)`. :meth:`PopulationODE.model` is that story as Pyro code, with a
``pyro.plate`` over the groups. The trajectories of a batch of groups are integrated at
once (fourth-order Runge-Kutta at a uniform step, read at each datum by its cubic Hermite
interpolant: :meth:`~pyro_pidkl.physics.ode.ExplicitODE.integrate_uniform`), the number of
steps chosen by doubling until the data's predictions move by less than
:data:`STEP_TOLERANCE` of the data's spread. A law affine in the state that reads no time
(compartments: :func:`~pyro_pidkl.physics.affine_ode.is_affine`) is solved exactly instead,
by the matrix exponential (:func:`~pyro_pidkl.physics.affine_ode.integrate_affine`).
"""

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ..physics.affine_ode import integrate_affine, is_affine
from ..physics.ode import explicit_ode
from ..physics.system import EquationSystem
from .effects import Effect, PerGroup, Random, Shared
from .groups import GroupedData

__all__ = ["PopulationODE", "STEP_TOLERANCE", "central_batch"]

#: the Runge-Kutta steps are doubled until the predictions at the data move by less than
#: this fraction of each output's spread
STEP_TOLERANCE = 1e-3
NOISES = ("additive", "log")


def central_batch(phi, step=1e-5):
    """``phi`` ``(M, P)`` and its central-difference moves: ``(batch (M, 2P + 1, P), h
    (M, P))``, each row's ``phi``, then ``phi + h_j e_j``, then ``phi - h_j e_j``, with
    ``h = step * max(|phi|, 1)``."""
    h = step * torch.clamp(phi.abs(), min=1.0)
    eye = torch.eye(phi.shape[1], dtype=phi.dtype)
    return torch.cat([phi[:, None], phi[:, None] + h[:, :, None] * eye,
                      phi[:, None] - h[:, :, None] * eye], 1), h


class _Entry:
    """One unconstrained column of :math:`\\phi`: a coefficient or an initial state."""

    def __init__(self, name, effect, transform, state=None):
        self.name, self.effect, self.transform, self.state = name, effect, transform, state

    @property
    def kind(self):
        return self.effect.kind


class PopulationODE:
    r"""A population model (module docstring).

    :param system: a :class:`~pyro_pidkl.physics.EquationSystem` that is an explicit ODE in
        one input (each output's first derivative, linearly).
    :param data: a :class:`~pyro_pidkl.population.GroupedData`; its outputs are among the
        system's.
    :param dict initial: each output's initial state at ``data.t0``: a number (every group),
        a covariate's name (each group its own: a dose) or an
        :class:`~pyro_pidkl.population.effects.Effect` (learned).
    :param dict effects: ``{coefficient: Effect}``; a coefficient not named is
        :class:`~pyro_pidkl.population.effects.Shared` from its
        :class:`~pyro_pidkl.physics.Parameter` (or held, where that is fixed).
    :param noise: ``"additive"`` or ``"log"``, or ``{output: noise}``.
    :param str omega: ``"diagonal"`` or ``"full"``: the random effects' covariance.
    """

    def __init__(self, system, data, initial, effects=None, noise="additive",
                 omega="diagonal", steps=None):
        if not isinstance(system, EquationSystem):
            raise TypeError("Expected an EquationSystem (one equation: outputs=('f',)); got "
                            f"{type(system).__name__}")
        if not isinstance(data, GroupedData):
            raise TypeError(f"Expected GroupedData; got {type(data).__name__}")
        self.ode = explicit_ode(system)
        if self.ode is None:
            raise ValueError(f"Expected an explicit ODE in one input (each output's first "
                             f"derivative entering linearly); {system.name!r} is not one")
        self.affine = is_affine(self.ode)
        self.system, self.data = system, data
        outputs = system.outputs
        unknown = [o for o in data.outputs if o not in outputs]
        if unknown:
            raise ValueError(f"Expected measured outputs among the system's {outputs}; got "
                             f"{tuple(unknown)}")
        missing = [o for o in outputs if o not in (initial or {})]
        if missing:
            raise ValueError(f"Expected an initial state for every output {outputs} (a number, "
                             f"a covariate's name or an Effect); missing {tuple(missing)}")
        if omega not in ("diagonal", "full"):
            raise ValueError(f"Expected omega 'diagonal' or 'full'; got {omega!r}")
        self.omega_kind = omega
        noise = {o: noise for o in data.outputs} if isinstance(noise, str) else dict(noise)
        bad = {o: n for o, n in noise.items() if n not in NOISES}
        if bad or set(noise) != set(data.outputs):
            raise ValueError(f"Expected a noise in {NOISES} for each measured output "
                             f"{data.outputs}; got {noise!r}")
        self.noise = noise
        self._layout(initial, dict(effects or {}))
        self._observations()
        self.steps = int(steps) if steps else None
        self._density = None

    # -- layout: phi_i = A_i beta + B eta_i ------------------------------------------------
    def _layout(self, initial, effects):
        G, system = self.data.n_groups, self.system
        unknown = [n for n in effects if n not in system.parameter_names]
        if unknown:
            raise ValueError(f"Expected effects of the system's coefficients "
                             f"{system.parameter_names}; got {tuple(unknown)}")
        self.entries, self.known = [], {}
        for n in system.parameter_names:
            spec = system.specs[n]
            e = effects.get(n)
            if e is None and spec.fixed:
                self.known[n] = float(spec.init)
                continue
            if e is not None and not isinstance(e, Effect):
                raise TypeError(f"Expected an Effect (Shared, Random, PerGroup) for {n!r}; got "
                                f"{type(e).__name__}")
            e = e if e is not None else Shared(float(spec.init))
            self.entries.append(_Entry(n, e, e.transform(spec.constraint)))
        self.x0_known = torch.full((G, len(system.outputs)), float("nan"), dtype=torch.float64)
        for c, o in enumerate(system.outputs):
            v = initial[o]
            if isinstance(v, Effect):
                self.entries.append(_Entry(f"{o}0", v, v.transform(constraints.real), state=c))
            elif isinstance(v, str):
                if v not in self.data.covariates:
                    raise KeyError(f"Expected covariate {v!r} for the initial {o}; the "
                                   f"covariates are {tuple(self.data.covariates)}")
                self.x0_known[:, c] = torch.as_tensor(self.data.covariates[v])
            else:
                self.x0_known[:, c] = float(v)
        for en in self.entries:
            e = en.effect
            try:
                ok = bool(torch.isfinite(en.transform.inv(torch.tensor(e.init,
                                                                       dtype=torch.float64))))
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"Expected {en.name}'s start {e.init} inside its constraint")
        columns, B, start, names = [], [], [], []
        P = len(self.entries)
        for j, en in enumerate(self.entries):
            e, u0 = en.effect, float(en.transform.inv(torch.tensor(en.effect.init,
                                                                   dtype=torch.float64)))
            if isinstance(e, PerGroup):
                for i in range(G):
                    columns.append((j, np.eye(G)[i]))
                    start.append(u0)
                    names.append(f"{en.name}[{self.data.labels[i]}]")
                continue
            columns.append((j, np.ones(G)))
            start.append(u0)
            names.append(en.name)
            if isinstance(e, Random):
                for k in e.covariates:
                    if k not in self.data.covariates:
                        raise KeyError(f"Expected covariate {k!r} of {en.name}; the covariates "
                                       f"are {tuple(self.data.covariates)}")
                    w = self.data.covariates[k]
                    c = np.log(w / np.median(w)) if (w > 0).all() else w - np.median(w)
                    columns.append((j, c))
                    start.append(0.0)
                    names.append(f"{en.name}~{k}")
                B.append(j)
        self.A = torch.zeros(G, P, len(columns), dtype=torch.float64)
        for col, (j, values) in enumerate(columns):
            self.A[:, j, col] = torch.as_tensor(values, dtype=torch.float64)
        self.B = torch.zeros(P, len(B), dtype=torch.float64)
        for k, j in enumerate(B):
            self.B[j, k] = 1.0
        self.beta_start = torch.tensor(start, dtype=torch.float64)
        self.beta_names = names
        self.random_names = [self.entries[j].name for j in B]
        self.omega_start = torch.tensor([self.entries[j].effect.sd for j in B],
                                        dtype=torch.float64)

    def _observations(self):
        d = self.data
        groups, comps, times, z = [], [], [], []
        for o in d.outputs:
            g, t, y = d.rows(o)
            if self.noise[o] == "log":
                if (y <= 0).any():
                    raise ValueError(f"Expected positive values of {o!r} for log-normal noise; "
                                     f"got {int((y <= 0).sum())} at or below zero")
                y = np.log(y)
            groups.append(g)
            comps.append(np.full(g.shape, self.system.outputs.index(o)))
            times.append(t)
            z.append(y)
        self.obs_group = np.concatenate(groups)
        self.obs_comp = np.concatenate(comps)
        t = np.concatenate(times)
        self.times = np.unique(t)
        self.obs_time = np.searchsorted(self.times, t)
        self.obs_z = torch.as_tensor(np.concatenate(z), dtype=torch.float64)
        self.noise_index = np.array([d.outputs.index(self.system.outputs[c])
                                     for c in self.obs_comp])
        self.log_noise = torch.tensor([self.noise[self.system.outputs[c]] == "log"
                                       for c in self.obs_comp])
        self.spread = np.array([max(float(np.std(self.obs_z.numpy()[self.noise_index == k])),
                                    1e-12) for k in range(len(d.outputs))])

    # -- shapes -----------------------------------------------------------------------------
    @property
    def n_groups(self):
        return self.data.n_groups

    def phi(self, beta, eta):
        r"""Each group's unconstrained coefficients :math:`\phi_i = A_i\beta + B\eta_i`
        ``(G, P)`` from ``beta`` ``(p,)`` and ``eta`` ``(G, q)``."""
        return torch.einsum("gpk,k->gp", self.A, beta) + eta @ self.B.T

    def values(self, phi):
        """``phi`` ``(M, P)`` as ``({coefficient: (M,)}, {output index: (M,)})``, constrained."""
        coef, states = {}, {}
        for j, en in enumerate(self.entries):
            v = en.transform(phi[:, j])
            (coef if en.state is None else states)[en.name if en.state is None else en.state] = v
        return coef, states

    def trajectories(self, phi, rows, times=None, steps=None, grad=False):
        r"""The outputs ``(M, C, T)`` of the groups ``rows`` ``(M,)`` with coefficients ``phi``
        ``(M, P)`` at ``times`` (default the data's distinct times), ``steps`` Runge-Kutta
        steps over :math:`[t_0, \max t]`."""
        coef, x0 = self._start(phi, rows)
        times = self.times if times is None else np.asarray(times, dtype=float)
        t0 = self.data.t0
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            if self.affine:                  # exact: the matrix exponential, no steps
                return integrate_affine(self.ode, x0, times - t0, coef)
            offset = torch.full((phi.shape[0],), t0, dtype=torch.float64)
            grid = self.grid(steps or self.steps or 64, float(times.max()) - t0)
            return self.ode.integrate_grid(x0, grid, times - t0, coef, t_offset=offset,
                                           grad=True)

    def _start(self, phi, rows):
        """The coefficients ``{name: (M,)}`` (known ones included) and initial states
        ``(M, C)`` of the groups ``rows`` ``(M,)`` with coefficients ``phi`` ``(M, P)``."""
        coef, states = self.values(phi)
        coef.update({n: torch.full((phi.shape[0],), v, dtype=phi.dtype)
                     for n, v in self.known.items()})
        x0 = self.x0_known[torch.as_tensor(rows)]
        if states:
            x0 = torch.stack([states.get(c, x0[:, c]) for c in range(x0.shape[1])], 1)
        return coef, x0

    def data_predictions(self, phi, steps=None, grad=False, variants=1):
        """Each datum's prediction on its noise's scale from the groups' coefficients
        ``phi`` ``(G, P)``: ``(n,)``; or, with ``variants`` ``k``, from ``k`` coefficient sets
        a group (``phi`` ``(G k, P)``, each group's in turn): ``(n, k)``. :meth:`trajectories`
        read at the data, or, for an affine law, one matrix exponential a datum and set."""
        G, k = self.n_groups, int(variants)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            if not self.affine:
                X = self.trajectories(phi, np.repeat(np.arange(G), k), steps=steps, grad=grad)
                X = X.reshape(G, k, *X.shape[1:])
                g = torch.stack([self.working(X[:, j], self.obs_group) for j in range(k)], 1)
                return g[:, 0] if variants == 1 else g
            coef, x0 = self._start(phi, np.repeat(np.arange(G), k))
            rows = (self.obs_group[:, None] * k + np.arange(k)[None, :]).reshape(-1)
            t = np.repeat(self.times[self.obs_time] - self.data.t0, k)
            X = integrate_affine(self.ode, x0, t, coef, rows=rows)             # (n k, C)
            f = X[torch.arange(X.shape[0]), torch.as_tensor(np.repeat(self.obs_comp, k))]
            g = self._noise_scale(f, self.log_noise.repeat_interleave(k)).reshape(-1, k)
            return g[:, 0] if variants == 1 else g

    @staticmethod
    def _noise_scale(f, log):
        """Predictions ``f`` on their noise's scale: the log where ``log`` (log-normal)."""
        return torch.where(log, torch.log(f.clamp_min(1e-300)), f)

    def grid(self, steps, span=None):
        r"""``steps`` Runge-Kutta steps over :math:`[0, 	ext{span}]` (from ``t0``; default the
        data's span): uniform, or, after :meth:`set_density`, placed so that each step's
        local error is about the same (the error density's fifth root equidistributed);
        past the data's span, steps of the last one's size."""
        data_span = float(self.times.max()) - self.data.t0
        span = data_span if span is None else span
        if self._density is None or data_span <= 0:
            grid = np.linspace(0.0, data_span, steps + 1)
        else:
            t, I = self._density
            grid = np.interp(np.linspace(0.0, I[-1], steps + 1), I, t)
        if span > data_span + 1e-12 * max(data_span, 1.0):
            h = grid[-1] - grid[-2] if grid.size > 1 else span
            more = int(np.ceil((span - data_span) / h))
            grid = np.r_[grid, np.linspace(data_span, span, more + 1)[1:]]
        return grid

    def set_density(self, phi, steps=512, rows=None):
        """Measure where the groups' trajectories at ``phi`` ``(M, P)`` (``M`` a multiple of
        the groups, as :meth:`choose_steps`) need short steps: the
        difference of ``steps`` and ``steps / 2`` uniform steps, per coarse step, scaled by
        each output's size (every group and output at its worst), its fifth root floored at
        a hundredth of its largest (steps at most a hundred times longer than the
        shortest)."""
        self._density = None
        rows = np.tile(np.arange(self.n_groups), phi.shape[0] // self.n_groups) \
            if rows is None else np.asarray(rows)
        span = float(self.times.max()) - self.data.t0
        nodes = np.linspace(0.0, span, steps // 2 + 1)
        with torch.no_grad():
            fine = self.trajectories(phi, rows, times=self.data.t0 + nodes, steps=steps)
            coarse = self.trajectories(phi, rows, times=self.data.t0 + nodes, steps=steps // 2)
        size = fine.abs().amax(dim=(0, 2)).clamp_min(1e-300)                # (C,)
        d = ((coarse - fine) / size[None, :, None]).numpy()
        e = np.abs(np.diff(d, axis=2)).max(axis=(0, 1))                      # (steps / 2,)
        if not np.isfinite(e).all() or e.max() <= 0:
            return
        m = e ** 0.2
        m = np.maximum(m, 1e-2 * m.max())
        I = np.r_[0.0, np.cumsum(m)]
        self._density = (nodes, I)

    def working(self, X, rows):
        """Each datum's prediction on its noise's scale (the log for log-normal noise) from
        trajectories ``X`` ``(M, C, T)`` of the batch rows ``rows`` ``(n,)`` (one per datum)."""
        f = X[torch.as_tensor(rows), torch.as_tensor(self.obs_comp),
              torch.as_tensor(self.obs_time)]
        return self._noise_scale(f, self.log_noise)

    # -- the generative story --------------------------------------------------------------
    def model(self):
        r"""The population as Pyro code: fixed effects, the random effects' scales and the
        noise under vague priors (the Laplace fit maximises the marginal likelihood without
        them, as nlme does), a random effect per group inside a ``pyro.plate``, each group's
        trajectory, the data."""
        q, n_noise = self.B.shape[1], len(self.data.outputs)
        beta = pyro.sample("beta", dist.Normal(self.beta_start, 10.0).to_event(1))
        omega_sd = pyro.sample("omega_sd", dist.HalfNormal(
            torch.full((q,), 2.0, dtype=torch.float64)).to_event(1))
        sigma = pyro.sample("sigma", dist.HalfNormal(
            torch.as_tensor(self.spread, dtype=torch.float64)).to_event(1))
        with pyro.plate("groups", self.n_groups):
            eta = pyro.sample("eta", dist.Normal(torch.zeros(q, dtype=torch.float64),
                                                 omega_sd).to_event(1))
        phi = self.phi(beta, eta)                                        # (G, P)
        g = self.data_predictions(phi, grad=True)                        # (n,)
        with pyro.plate("data", g.shape[0]):
            pyro.sample("z", dist.Normal(g, sigma[torch.as_tensor(self.noise_index)]),
                        obs=self.obs_z)

    def spread_out(self, phi, beta, omega):
        """The groups' coefficients ``phi`` ``(G, P)`` and, for each group, its typical
        coefficients :math:`A_i\beta` moved by two standard deviations of each random
        effect either way (``omega`` ``(q, q)``): the coefficients a fit may try, for the
        steps to be placed and checked at (``(M, P)``, the groups in turn)."""
        sd = torch.sqrt(torch.diagonal(torch.as_tensor(omega)))
        typical = torch.einsum("gpk,k->gp", self.A, beta)
        moves = [phi] + [typical + k * 2 * sd[j] * self.B[:, j] for j in range(len(sd))
                         for k in (-1, 1)]
        return torch.cat(moves)

    def choose_steps(self, phi, start=32, most=4096, rows=None):
        """The fewest Runge-Kutta steps (doubling from ``start``) whose predictions at the
        data, for the coefficients ``phi`` ``(M, P)`` (``M`` a multiple of the groups, the
        groups in turn), move by less than :data:`STEP_TOLERANCE` of each output's spread
        when the steps are doubled."""
        rows = np.tile(np.arange(self.n_groups), phi.shape[0] // self.n_groups) \
            if rows is None else np.asarray(rows)
        at = np.concatenate([np.flatnonzero(self.obs_group == i) * 0 + b
                             for b, i in enumerate(rows)])
        obs_of = [np.flatnonzero(self.obs_group == i) for i in rows]
        obs = (np.concatenate([self.obs_comp[k] for k in obs_of]),
               np.concatenate([self.obs_time[k] for k in obs_of]))
        n = start
        scale = np.concatenate([self.spread[self.noise_index[k]] for k in obs_of])

        def predictions(k):
            X = self.trajectories(phi, rows, steps=k)
            return X[torch.as_tensor(at), torch.as_tensor(obs[0]), torch.as_tensor(obs[1])]
        with torch.no_grad():
            prev = predictions(n)
            while n < most:
                now = predictions(2 * n)
                moved = (now - prev).abs().numpy() / scale
                if np.isfinite(moved).all() and moved.max() < STEP_TOLERANCE:
                    break
                n, prev = 2 * n, now
        return n
