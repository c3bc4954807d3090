"""Whether two versions of the library train the same objective: one JSON line per number of
``pk.fit`` steps, with the loss and gradient norm of one ``Trace_ELBO`` step after them, the
test RMSE and the learned coefficients, on the first-order ODE (``simulate_first_order_ode``),
model and fit seeds fixed. Run it once per version and compare the lines:

    python studies/same_objective.py > new.jsonl
    git worktree add /tmp/old <commit>
    PYTHONPATH=/tmp/old python studies/same_objective.py > old.jsonl
"""

import json

import pyro
import torch
from pyro.infer import Trace_ELBO

import pyro_pidkl as pk
from pyro_pidkl import physics


def main():
    data = pk.datasets.simulate_first_order_ode()
    for steps in (0, 1, 10, 100, 300):
        model = pk.PIDKL(data.X_train, data.y_train, physics.first_order_ode(B=0.5, D=0.5),
                         gamma=1.0, m=30, seed=0, domain=pk.Box(t=(0.0, 1.0)))
        if steps:
            pk.fit(model, num_steps=steps, lr=0.01, seed=1, progress=False)
        pyro.clear_param_store()
        pyro.set_rng_seed(5)
        with pyro.poutine.trace(param_only=True) as tr:
            loss = Trace_ELBO().loss_and_grads(model.model, model.guide)
        grad = torch.cat([s["value"].unconstrained().grad.flatten()
                          for s in tr.trace.nodes.values()])
        mean, _ = model(data.X_test)
        print(json.dumps({"steps": steps, "loss": loss, "grad_norm": float(grad.norm()),
                          "rmse": float(pk.rmse(mean, data.y_test)),
                          **model.equation_parameters(), "library": pk.__file__}))


if __name__ == "__main__":
    main()
