"""The reference posterior for ``benchmarks/random_odes.py``: NumPyro's NUTS with the ODE
solved in the likelihood (``jax.experimental.ode.odeint``), in its own environment
(``PIDKL_PEER_PYTHON``: an interpreter with ``numpyro`` and ``jax``; this library is not
imported here).

Reads one drawn problem as JSON on stdin (the generator's dict: ``family``, ``law``, ``t``,
``y``, ``observed``, ``x0``, ``truth``, and ``nu``, ``held``, ``A``, ``w``, ``reactions``,
``species`` by family) and writes the posterior summary as JSON on stdout. The model: each
learned coefficient ``log k ~ Normal(log start, 2)`` (the library's weak default prior, around
the user's start), each measured component's initial state ``~ Normal(its first datum, 2
sd(data))``, an oscillator's initial velocity ``~ Normal(0, 3 sd(data))``, a hidden
species' ``~ Normal(its known value, 0.1 + 0.3 value)``, each measured output's noise ``~
HalfNormal(sd(data))``, the data ``~ Normal(x(t), noise)``; an epidemic's susceptible
fraction at its known value, the log of its first expected count ``~ Normal(log(first
count + 1/2), 2)``, its counts ``~ Poisson(exp(u(t)))``. Two chains of ``warmup +
samples`` started at the truth (the reference posterior in the truth's basin, not a
search). Returns per coefficient the posterior mean and the central 90% interval, R-hat
and effective size, the divergences, the seconds (compilation included) and the versions.
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
from jax_odes import random_vector_field as vector_field  # noqa: E402


def main():
    spec = json.load(sys.stdin)
    rhs = vector_field(spec)
    names = list(spec["truth"])
    held = spec.get("held", {})
    t = jnp.asarray(spec["t"])
    Y = np.asarray(spec["y"])
    observed = spec["observed"]
    C = len(spec["x0"])

    def model():
        k = dict(held)
        for n in names:
            k[n] = jnp.exp(numpyro.sample("log_" + n, dist.Normal(float(np.log(spec["start"][n])),
                                                                  2.0)))
            numpyro.deterministic(n, k[n])
        x0 = []
        for c in range(C):
            if spec["family"] == "epidemic":
                x0.append(jnp.asarray(float(spec["s0"])) if c == 0 else numpyro.sample(
                    f"x0_{c}", dist.Normal(float(np.log(Y[0][0] + 0.5)), 2.0)))
            elif c in observed:
                y = Y[observed.index(c)]
                x0.append(numpyro.sample(f"x0_{c}", dist.Normal(float(y[0]),
                                                                2 * float(np.std(y)) + 1e-3)))
            elif spec["family"] == "oscillator":
                x0.append(numpyro.sample(f"x0_{c}", dist.Normal(0.0, 3 * float(np.std(Y)) + 1e-3)))
            else:
                v = float(spec["x0"][c])
                x0.append(numpyro.sample(f"x0_{c}", dist.Normal(v, 0.1 + 0.3 * abs(v))))
        traj = odeint(lambda s, tt: rhs(s, tt, k), jnp.stack(x0), t, rtol=1e-7, atol=1e-9,
                      mxstep=10000)
        for j, c in enumerate(observed):
            if spec["family"] == "epidemic":
                numpyro.sample(f"y_{c}", dist.Poisson(jnp.exp(jnp.minimum(traj[:, c], 700.0))),
                               obs=jnp.asarray(Y[j]))
                continue
            sigma = numpyro.sample(f"sigma_{c}", dist.HalfNormal(float(np.std(Y[j])) + 1e-6))
            numpyro.sample(f"y_{c}", dist.Normal(traj[:, c], sigma), obs=jnp.asarray(Y[j]))

    init = {f"log_{n}": jnp.log(spec["truth"][n]) for n in names}
    init.update({f"x0_{c}": jnp.asarray(float(spec["x0"][c])) for c in range(C)
                 if not (spec["family"] == "epidemic" and c == 0)})
    began = time.perf_counter()
    mcmc = MCMC(NUTS(model, init_strategy=init_to_value(values=init)),
                num_warmup=spec.get("warmup", 500), num_samples=spec.get("samples", 500),
                num_chains=2, chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(spec.get("seed", 0)))
    seconds = time.perf_counter() - began
    grouped = mcmc.get_samples(group_by_chain=True)
    stats = summary({n: grouped[n] for n in names}, prob=0.9)
    samples = mcmc.get_samples()
    out = {"coefficients": {}, "seconds": seconds,
           "divergences": int(mcmc.get_extra_fields()["diverging"].sum()),
           "versions": {"numpyro": numpyro.__version__, "jax": jax.__version__}}
    for n in names:
        v = np.asarray(samples[n])
        out["coefficients"][n] = {"mean": float(v.mean()), "lower": float(np.quantile(v, 0.05)),
                                  "upper": float(np.quantile(v, 0.95)),
                                  "r_hat": float(stats[n]["r_hat"]),
                                  "ess": float(stats[n]["n_eff"])}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
