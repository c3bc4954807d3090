"""Development twins of five benchmark problems (other coefficients and data; not in the
benchmark): the physics-conditioned GP with the residual variance fixed at 1e-4 (relative)
against learned from 0.1 above that floor, conditional objective, seed 1, both splits.
Run: python studies/conditioned_dev_twins.py fixed|learned >> studies/conditioned_dev_twins.jsonl
Outcome: fixed kept as the default (coefficient errors <= 3%, coverage 0.93-1.00; learned
left the residual variance near 0.1 on 5 of 10 fits and recovered coefficients less well)."""
import dataclasses, torch, time, sys, json
torch.set_num_threads(1)
import pyro_pidkl as pk
from pyro_pidkl.datasets import problems as P
twins = [
  dataclasses.replace(P.PROBLEMS["oscillator"], name="osc_twin", domain={"t": (0.0, 5.0)},
      solution=lambda x: P._oscillator(x, omega=3.0, zeta=0.05), truth={"omega": 3.0, "zeta": 0.05}),
  dataclasses.replace(P.PROBLEMS["wave"], name="wave_twin", solution=lambda x: P._wave(x, c=0.7), truth={"c": 0.7}),
  dataclasses.replace(P.PROBLEMS["heat"], name="heat_twin", solution=lambda x: P._heat(x, alpha=0.1), truth={"alpha": 0.1}),
  dataclasses.replace(P.PROBLEMS["ode1_forced"], name="forced_twin", solution=lambda x: P._ode1_forced(x, k=0.3, w=2.0),
      psi=lambda f, x, k: f.d("t") + k * f - torch.cos(2 * x["t"]), truth={"k": 0.3}),
  dataclasses.replace(P.PROBLEMS["logistic"], name="logistic_twin", solution=lambda x: P._logistic(x, r=0.8, f0=0.05),
      domain={"t": (0.0, 12.0)}, truth={"r": 0.8}),
]
cands = {"fixed": {}, "learned": dict(learn_residual_noise=True, residual_noise=0.1)}
name = sys.argv[1]
for tw in twins:
    for split in ("extrapolation", "interpolation"):
        d = tw.sample(split, 1)
        m = pk.PhysicsConditionedGP(d.X_train, d.y_train, tw.equation(), tw.input_names, domain=pk.Box(**tw.domain), **cands[name])
        t0 = time.time()
        pk.fit(m, num_steps=1000, lr=0.01, seed=1, progress=False)
        mean, var = m(d.X_test, noiseless=False)
        est = m.equation_parameters()
        err = max(abs(est[k] - v) / v for k, v in tw.truth.items())
        print(json.dumps({"cand": name, "twin": tw.name, "split": split, "rmse": float(pk.rmse(mean, torch.as_tensor(d.f_test))), "cov": pk.coverage(mean, var, torch.as_tensor(d.y_test)), "err": err, "tau": float(m.residual_noise), "s": round(time.time()-t0)}), flush=True)
