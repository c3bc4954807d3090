"""probdiffeq's Fenrir fit of an ODE's coefficients (Tronarp, Bosch & Hennig 2022;
probdiffeq's tutorial on it), shared by the peers ``probdiffeq_ode.py`` (the systems
benchmark) and ``probdiffeq_random.py`` (the random problems): an integrated Wiener prior of
order 2 per component (blockwise), the ODE as a zeroth-order Taylor constraint, adaptive
steps saved at the data's times (and the predictions'), the log marginal likelihood of the
data (``loss_lml_timeseries``; an entry not measured enters with a standard deviation of
10^6, a constant), maximised over the log rates, the initial state and each measured
output's log noise by L-BFGS (scipy, on JAX's value and gradient) through diffusion
tempering (output scales 100, 10, 1; Beck et al. 2024), Laplace (the Hessian by central
differences of JAX's gradient: JAX's own through the adaptive solver's bounded loop came out
non-finite). Runs in probdiffeq's environment; this library is not imported here."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from probdiffeq import ivpsolve, probdiffeq
from scipy.optimize import minimize

jax.config.update("jax_enable_x64", True)

UNSEEN = 1e6
SCALES = (100.0, 10.0, 1.0)


def fenrir_fit(rhs, names, start, t0, times, u, seen, measured):
    """Fit from ``start`` = ``[log rates (P); x0 (C); log noise (measured)]``.

    :param rhs: ``f(s, t, k)`` in JAX, ``k`` the rates by name.
    :param times: the save-at grid after ``t0`` ``(T,)``; ``u`` ``(T, C)`` the data there,
        ``seen`` ``(T, C)`` where they are measured.
    :returns: ``(x, cov, solve, iterations)``: the fitted parameters, their Laplace
        covariance (``inf`` where the Hessian cannot be inverted), ``solve(theta, scale)``
        and L-BFGS's iterations."""
    P, C = len(names), u.shape[1]
    grid = jnp.asarray(times)
    u, seen = jnp.asarray(u), jnp.asarray(seen)
    ssm = probdiffeq.state_space_model_blockdiag()
    strategy = probdiffeq.strategy_smoother_fixedpoint()

    def solve(theta, output_scale):
        k = dict(zip(names, jnp.exp(theta[:P])))

        def f(y, /, *, t):
            return rhs(y, t, k)
        vf = probdiffeq.ode(f)
        y0 = theta[P:P + C]
        d1 = f(y0, t=t0)
        d2 = jax.jvp(lambda y: f(y, t=t0), (y0,), (d1,))[1]
        iwp = ssm.prior_wiener_integrated((y0, d1, d2),
                                          output_scale=output_scale * jnp.ones(C))
        ts0 = ssm.constraint_ode_ts0(vf)
        solver = probdiffeq.solver(strategy=strategy, constraint=ts0)
        error = probdiffeq.error_state_std(constraint=ts0)

        def while_loop(cond, body, init):
            return eqx.internal.while_loop(cond, body, init, kind="bounded", max_steps=64)
        fn = ivpsolve.solve_adaptive_save_at(solver=solver, error=error,
                                             while_loop=while_loop)
        return fn(iwp, save_at=jnp.concatenate([jnp.array([t0]), grid]), atol=1e-4,
                  rtol=1e-3)

    loss_lml = probdiffeq.loss_lml_timeseries()

    def nll(theta, output_scale):
        sol = solve(theta, output_scale)
        sd = jnp.full((len(times), C), UNSEEN)
        sd = sd.at[:, jnp.array(measured)].set(
            jnp.where(seen[:, jnp.array(measured)], jnp.exp(theta[P + C:]), UNSEEN))
        full = jnp.concatenate([jnp.zeros((1, C)), u], 0)
        sd = jnp.concatenate([jnp.full((1, C), UNSEEN), sd], 0)
        return -loss_lml(full, std=sd, posterior=sol.solution_full)

    vg = jax.jit(jax.value_and_grad(nll))
    x, nit = np.asarray(start, dtype=float), 0
    for s in SCALES:
        def f(th, s=s):
            v, g = vg(jnp.asarray(th), s)
            v, g = float(v), np.asarray(g, dtype=float)
            return (v, g) if np.isfinite(v) and np.isfinite(g).all() else (1e30, np.zeros_like(g))
        res = minimize(f, x, jac=True, method="L-BFGS-B")
        x, nit = res.x, nit + res.nit
    # the Hessian by central differences of JAX's gradient (JAX's own Hessian through the
    # adaptive solver's bounded loop came out non-finite)
    H = np.zeros((len(x), len(x)))
    for k in range(len(x)):
        h = 1e-4 * max(1.0, abs(x[k]))
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        H[:, k] = (np.asarray(vg(jnp.asarray(up), SCALES[-1])[1])
                   - np.asarray(vg(jnp.asarray(down), SCALES[-1])[1])) / (2 * h)
    try:
        cov = np.linalg.inv(0.5 * (H + H.T))
    except np.linalg.LinAlgError:
        cov = np.full_like(H, np.inf)
    return x, cov, solve, nit
