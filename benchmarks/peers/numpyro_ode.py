"""The exact-ODE peer for ``benchmarks/systems.py``: NumPyro's NUTS with the ODE solved in
the likelihood (``jax.experimental.ode.odeint``, as NumPyro's own Lotka-Volterra example),
run in its own environment (``PIDKL_PEER_PYTHON``: an interpreter with ``numpyro`` and
``jax``; this library is not imported here).

Reads one problem as JSON on stdin and writes the posterior summary as JSON on stdout::

    {"system": "lotka_volterra", "outputs": ["x", "y"], "coefficients": ["alpha", ...],
     "observations": {"x": [[t...], [y...]], ...}, "hidden": {"s": [loc, scale]},
     "t0": 0.0, "predict": [t...], "seed": 0, "warmup": 1000, "samples": 1000, "chains": 2,
     "init": {"log_alpha": 0.0, "x0_x": 2.0, ...}}

The model, in NumPyro's idiom: each rate ``log k ~ Normal(0, 3)``; an observed output's
initial state ``~ Normal(its first datum, 2 sd(data))``, an unobserved one's ``~ Normal(loc,
3 scale)``; each observed output's noise ``~ HalfNormal(sd(data))``; the data ``~ Normal(x(t),
noise)`` with ``x`` the ODE's solution (rtol 1e-6). The chains start at ``init`` (the
caller gives the true rates and initial states: this is the reference posterior in the
truth's basin, not a search for it; from NumPyro's default start, uniform in (-2, 2) on the
unconstrained scale, 100 + 100 on Lotka-Volterra settled in the mode of a nearly constant
trajectory, rates near 0.02). With ``"priors": {"rates": {name: [loc, scale]}, "initial":
[loc, scale], "noise": [loc, scale]}`` the model is the Stan case study's instead (each rate
truncated normal at 0, each initial state normal, each noise log-normal). Returns per coefficient the posterior
mean, sd, the central ``prob`` interval (default 0.95), R-hat and effective sample size; per output the
posterior mean and variance of ``x(t)`` at ``predict``; the divergences, the seconds (one
thread; compilation included) and the versions.
"""

import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.experimental.ode import odeint  # noqa: E402
from numpyro.diagnostics import summary  # noqa: E402
from numpyro.infer import MCMC, NUTS, init_to_value  # noqa: E402

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_odes import SYSTEMS  # noqa: E402


def main():
    spec = json.load(sys.stdin)
    rhs = SYSTEMS[spec["system"]]
    outputs, names = spec["outputs"], spec["coefficients"]
    obs = spec["observations"]
    t0 = float(spec["t0"])
    times = sorted({t0} | {float(t) for o in obs.values() for t in o[0]})
    ts = jnp.array(times)
    where = {o: jnp.array([times.index(float(t)) for t in obs[o][0]]) for o in obs}
    ys = {o: jnp.array(obs[o][1]) for o in obs}

    def vector_field(s, t, *theta):
        return rhs(s, t, dict(zip(names, theta)))

    priors = spec.get("priors")       # the Stan case study's, where given

    def model():
        if priors:
            theta = [numpyro.sample(n, dist.TruncatedNormal(*priors["rates"][n], low=0.0))
                     for n in names]
        else:
            theta = [jnp.exp(numpyro.sample("log_" + n, dist.Normal(0.0, 3.0))) for n in names]
            for n, v in zip(names, theta):
                numpyro.deterministic(n, v)
        x0 = []
        for o in outputs:
            if priors:
                x0.append(numpyro.sample("x0_" + o, dist.Normal(*priors["initial"])))
            elif o in obs:
                y = np.asarray(obs[o][1])
                x0.append(numpyro.sample("x0_" + o, dist.Normal(float(y[0]),
                                                                2 * float(np.std(y)) + 1e-3)))
            else:
                loc, scale = spec["hidden"][o]
                x0.append(numpyro.sample("x0_" + o, dist.Normal(loc, 3 * scale)))
        traj = odeint(vector_field, jnp.stack(x0), ts, *theta, rtol=1e-6, atol=1e-6,
                      mxstep=4000)
        for c, o in enumerate(outputs):
            if o in obs:
                sigma = numpyro.sample("sigma_" + o, dist.LogNormal(*priors["noise"]) if priors
                                       else dist.HalfNormal(float(np.std(obs[o][1]))))
                numpyro.sample("y_" + o, dist.Normal(traj[where[o], c], sigma), obs=ys[o])

    began = time.perf_counter()
    init = init_to_value(values={k: jnp.asarray(v) for k, v in spec.get("init", {}).items()})
    mcmc = MCMC(NUTS(model, init_strategy=init), num_warmup=spec["warmup"], num_samples=spec["samples"],
                num_chains=spec["chains"], chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(spec["seed"]))
    seconds = time.perf_counter() - began
    grouped = mcmc.get_samples(group_by_chain=True)
    stats = summary({n: grouped[n] for n in names}, prob=0.95)
    samples = mcmc.get_samples()
    prob = float(spec.get("prob", 0.95))
    out = {"coefficients": {}, "outputs": {}, "seconds": seconds,
           "divergences": int(mcmc.get_extra_fields()["diverging"].sum()),
           "versions": {"numpyro": numpyro.__version__, "jax": jax.__version__},
           "settings": {k: spec[k] for k in ("warmup", "samples", "chains", "seed")}}
    for n in names:
        v = np.asarray(samples[n])
        out["coefficients"][n] = {
            "mean": float(v.mean()), "sd": float(v.std()),
            "lower": float(np.quantile(v, (1 - prob) / 2)),
            "upper": float(np.quantile(v, (1 + prob) / 2)),
            "r_hat": float(stats[n]["r_hat"]), "ess": float(stats[n]["n_eff"])}
    predict = jnp.array(sorted({t0} | {float(t) for t in spec["predict"]}))
    keep = np.searchsorted(np.asarray(predict), np.asarray(spec["predict"], dtype=float))
    x0 = jnp.stack([samples["x0_" + o] for o in outputs], 1)
    theta = [samples[n] for n in names]
    thin = slice(None, None, max(1, x0.shape[0] // 200))          # 200 draws' trajectories
    traj = jax.vmap(lambda x, *th: odeint(vector_field, x, predict, *th, rtol=1e-6, atol=1e-6,
                                          mxstep=4000))(x0[thin], *[t[thin] for t in theta])
    traj = np.asarray(traj)[:, keep]                                # (draws, T, C)
    for c, o in enumerate(outputs):
        out["outputs"][o] = {"mean": np.nanmean(traj[..., c], 0).tolist(),
                             "var": np.nanvar(traj[..., c], 0).tolist()}
        if o in obs:        # the noise's posterior mean variance: predictive = var + this
            out["outputs"][o]["noise_var"] = float(np.mean(np.asarray(samples["sigma_" + o]) ** 2))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
