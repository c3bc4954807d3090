"""The PINN peer for ``benchmarks/lorenz.py``: DeepXDE's own Lorenz inverse example
(``examples/pinn_inverse/Lorenz_inverse.py`` of ``lululxvi/deepxde``) with its settings
unchanged, run in its own environment (``PIDKL_PEER_PYTHON``: an interpreter with
``deepxde`` and its PyTorch backend; this library is not imported here).

Reads JSON on stdin::

    {"data": "<deepxde checkout>/examples/dataset/Lorenz.npz", "seed": 0,
     "predict": [t...], "adam_iterations": 20000}

and writes JSON on stdout: the learned C1, C2, C3, the network's prediction of the three
components at ``predict``, the seconds (one thread) and the versions. The example, as
DeepXDE ships it: the Lorenz system with unknown ``C1, C2, C3`` started at 1; the initial
values (-8, 7, 27) as conditions at t = 0; the 25 observations of every component as
point conditions; 400 residual points on [0, 3] and the observation times as anchors; an
FNN 1-40-40-40-3 (tanh, Glorot uniform); Adam (lr 1e-3, 20000 iterations) then L-BFGS.
"""

import contextlib
import json
import os
import sys
import time

os.environ.setdefault("DDE_BACKEND", "pytorch")

import numpy as np  # noqa: E402


def main():
    spec = json.loads(sys.stdin.read())
    import torch
    torch.set_num_threads(1)
    with contextlib.redirect_stdout(sys.stderr):
        import deepxde as dde

    dde.config.set_random_seed(int(spec.get("seed", 0)))
    data = np.load(spec["data"])
    observe_t, ob_y = data["t"], data["y"]
    C1, C2, C3 = dde.Variable(1.0), dde.Variable(1.0), dde.Variable(1.0)

    def lorenz(x, y):
        y1, y2, y3 = y[:, 0:1], y[:, 1:2], y[:, 2:]
        dy1_x = dde.grad.jacobian(y, x, i=0)
        dy2_x = dde.grad.jacobian(y, x, i=1)
        dy3_x = dde.grad.jacobian(y, x, i=2)
        return [dy1_x - C1 * (y2 - y1), dy2_x - y1 * (C2 - y3) + y2,
                dy3_x - y1 * y2 + C3 * y3]

    def boundary(_, on_initial):
        return on_initial

    geom = dde.geometry.TimeDomain(0, 3)
    def constant(v):
        return lambda X: v

    conditions = [dde.icbc.IC(geom, constant(v), boundary, component=c)
                  for c, v in enumerate((-8, 7, 27))]
    conditions += [dde.icbc.PointSetBC(observe_t, ob_y[:, c:c + 1], component=c)
                   for c in range(3)]
    problem = dde.data.PDE(geom, lorenz, conditions, num_domain=400, num_boundary=2,
                           anchors=observe_t)
    net = dde.nn.FNN([1] + [40] * 3 + [3], "tanh", "Glorot uniform")
    model = dde.Model(problem, net)
    variables = [C1, C2, C3]
    t0 = time.process_time()
    w0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):      # DeepXDE's progress: not our answer
        model.compile("adam", lr=0.001, external_trainable_variables=variables)
        model.train(iterations=int(spec.get("adam_iterations", 20000)), display_every=100000)
        model.compile("L-BFGS", external_trainable_variables=variables)
        model.train(display_every=100000)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    t = np.asarray(spec["predict"], dtype=float)[:, None]
    pred = model.predict(t)
    out = {"coefficients": {"C1": float(C1.detach()), "C2": float(C2.detach()),
                            "C3": float(C3.detach())},
           "predict": np.asarray(pred).tolist(), "cpu_seconds": cpu, "seconds": wall,
           "versions": {"deepxde": dde.__version__, "torch": torch.__version__,
                        "backend": dde.backend.backend_name},
           "settings": {"adam_iterations": int(spec.get("adam_iterations", 20000)),
                        "num_domain": 400, "net": "1-40-40-40-3 tanh", "threads": 1}}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
