"""NumPyro's hierarchical NUTS on the theophylline population, for benchmarks/population.py,
run in its own environment (``PIDKL_PEER_PYTHON``: an interpreter with numpyro and jax; this
library is not imported here). Reads ``{"csv": path, "warmup": W, "samples": S, "chains": C,
"seed": s}`` as JSON on stdin; writes the posterior mean and sd of each population parameter,
R-hat, the divergences, the CPU seconds and the versions as JSON on stdout.

The model is nlme's (one compartment, first-order absorption, the closed form nlme's
``SSfol`` evaluates), in NumPyro's idiom: ``lKe, lKa, lCl ~ Normal(start, 10)``, the random
effects' sds on lKa and lCl ``~ HalfNormal(2)``, the residual sd ``~ HalfNormal(sd(conc))``,
``eta_i ~ Normal(0, sd)`` inside a plate over subjects (non-centred), ``conc ~ Normal(C(t),
sigma)``. The chains start at nlme's starting values.
"""

import csv
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
from numpyro.infer import MCMC, NUTS, init_to_value  # noqa: E402

jax.config.update("jax_enable_x64", True)


def main():
    spec = json.load(sys.stdin)
    with open(spec["csv"]) as fh:
        rows = list(csv.DictReader(fh))
    labels = sorted({r["Subject"] for r in rows}, key=lambda s: int(s))
    subj = jnp.array([labels.index(r["Subject"]) for r in rows])
    t = jnp.array([float(r["Time"]) for r in rows])
    dose = jnp.array([float(r["Dose"]) for r in rows])
    y = jnp.array([float(r["conc"]) for r in rows])
    G = len(labels)

    def model():
        lke = numpyro.sample("lKe", dist.Normal(-2.5, 10.0))
        lka = numpyro.sample("lKa", dist.Normal(0.5, 10.0))
        lcl = numpyro.sample("lCl", dist.Normal(-3.0, 10.0))
        sd_ka = numpyro.sample("sd_lKa", dist.HalfNormal(2.0))
        sd_cl = numpyro.sample("sd_lCl", dist.HalfNormal(2.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(float(np.std(np.asarray(y)))))
        with numpyro.plate("subjects", G):
            z_ka = numpyro.sample("z_ka", dist.Normal(0.0, 1.0))
            z_cl = numpyro.sample("z_cl", dist.Normal(0.0, 1.0))
        ke = jnp.exp(lke)
        ka = jnp.exp(lka + sd_ka * z_ka)[subj]
        cl = jnp.exp(lcl + sd_cl * z_cl)[subj]
        c = dose * ke * ka / (cl * (ka - ke)) * (jnp.exp(-ke * t) - jnp.exp(-ka * t))
        numpyro.sample("conc", dist.Normal(c, sigma), obs=y)

    init = {"lKe": -2.5, "lKa": 0.5, "lCl": -3.0, "sd_lKa": 0.5, "sd_lCl": 0.3, "sigma": 1.0,
            "z_ka": jnp.zeros(G), "z_cl": jnp.zeros(G)}
    began = time.process_time()
    mcmc = MCMC(NUTS(model, init_strategy=init_to_value(values=init)),
                num_warmup=spec.get("warmup", 1000), num_samples=spec.get("samples", 1000),
                num_chains=spec.get("chains", 2), chain_method="sequential",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(spec.get("seed", 0)))
    seconds = time.process_time() - began
    draws = mcmc.get_samples(group_by_chain=True)
    from numpyro.diagnostics import summary
    s = summary({k: v for k, v in draws.items() if not k.startswith("z_")})
    out = {k: {"mean": float(v["mean"]), "sd": float(v["std"]), "r_hat": float(v["r_hat"])}
           for k, v in s.items()}
    out["divergences"] = int(mcmc.get_extra_fields()["diverging"].sum())
    out["cpu_seconds"] = seconds
    out["version"] = f"numpyro {numpyro.__version__}, jax {jax.__version__}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
