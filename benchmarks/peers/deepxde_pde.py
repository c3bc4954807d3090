"""The PINN peer of ``benchmarks/random_pdes.py``: DeepXDE's PINN for an inverse problem, set
up as DeepXDE's own inverse examples are (``examples/pinn_inverse/``: unknown coefficients as
``dde.Variable``, the observations as a ``PointSetBC`` and as anchors of the residual, a tanh
FNN with Glorot initialisation, Adam then L-BFGS), run in its own environment
(``PIDKL_PEER_PYTHON``: an interpreter with ``deepxde`` and its PyTorch backend; this library
is not imported here).

Reads JSON on stdin::

    {"family": "burgers", "truth": {...}, "start": {"nu": 0.02}, "box": {"x": [-1, 1],
     "t": [0, 1]}, "X": [[x, t], ...], "y": [...], "seed": 0, "net": [32, 32, 32],
     "adam_iterations": 10000, "lbfgs_iterations": 5000, "num_domain": 2000, "lr": 0.001}

and writes JSON on stdout: each learned coefficient, the CPU and wall seconds (one thread) and
the versions. Coefficients not in ``start`` are held at ``truth``, as the library's are. No
initial or boundary condition is given (the data alone, as in the PINN paper's
identification). Heat with an unknown source (``heat_source``) gives the network a second
output, the source, with a second residual ``g_t = 0`` (a source of position alone).
"""

import contextlib
import json
import os
import sys
import time

os.environ.setdefault("DDE_BACKEND", "pytorch")

import numpy as np  # noqa: E402


def residual(family, c, dde):
    """The family's PDE residual ``(x, u) -> r`` with coefficients ``c`` (variables or
    numbers)."""
    def burgers(x, u):
        u_x = dde.grad.jacobian(u, x, i=0, j=0)
        u_t = dde.grad.jacobian(u, x, i=0, j=1)
        u_xx = dde.grad.hessian(u, x, i=0, j=0)
        return u_t + c["l1"] * u * u_x - c["nu"] * u_xx

    def nonlinear_diffusion(x, u):
        u_x = dde.grad.jacobian(u, x, i=0, j=0)
        u_t = dde.grad.jacobian(u, x, i=0, j=1)
        u_xx = dde.grad.hessian(u, x, i=0, j=0)
        return u_t - c["D"] * ((1 + u * u) * u_xx + 2 * u * u_x * u_x)

    def reaction_diffusion(x, u):
        u_t = dde.grad.jacobian(u, x, i=0, j=1)
        u_xx = dde.grad.hessian(u, x, i=0, j=0)
        return u_t - c["D"] * u_xx - c["r"] * u * (1 - u)

    def advection_diffusion(x, u):
        u_x = dde.grad.jacobian(u, x, i=0, j=0)
        u_t = dde.grad.jacobian(u, x, i=0, j=1)
        u_xx = dde.grad.hessian(u, x, i=0, j=0)
        return u_t + c["c"] * u_x - c["D"] * u_xx

    def heat_source(x, u):
        # u[:, 0] the state, u[:, 1] the unknown source, held constant in time (g_t = 0)
        u_t = dde.grad.jacobian(u, x, i=0, j=1)
        u_xx = dde.grad.hessian(u, x, component=0, i=0, j=0)
        g_t = dde.grad.jacobian(u, x, i=1, j=1)
        return [u_t - c["D"] * u_xx - u[:, 1:2], g_t]

    def heat2d(x, u):
        u_t = dde.grad.jacobian(u, x, i=0, j=2)
        u_xx = dde.grad.hessian(u, x, i=0, j=0)
        u_yy = dde.grad.hessian(u, x, i=1, j=1)
        return u_t - c["D"] * (u_xx + u_yy)
    return locals()[family]


def main():
    spec = json.loads(sys.stdin.read())
    import torch
    torch.set_num_threads(1)
    with contextlib.redirect_stdout(sys.stderr):
        import deepxde as dde
    dde.config.set_random_seed(int(spec.get("seed", 0)))
    family, box = spec["family"], spec["box"]
    variables = {n: dde.Variable(float(v)) for n, v in spec["start"].items()}
    c = {**{n: float(v) for n, v in spec["truth"].items()}, **variables}
    space = [k for k in box if k != "t"]
    lo, hi = [box[k][0] for k in space], [box[k][1] for k in space]
    geom = (dde.geometry.Interval(lo[0], hi[0]) if len(space) == 1
            else dde.geometry.Rectangle(lo, hi))
    domain = dde.geometry.GeometryXTime(geom, dde.geometry.TimeDomain(*box["t"]))
    X = np.asarray(spec["X"], dtype=float)
    y = np.asarray(spec["y"], dtype=float)[:, None]
    observe = dde.icbc.PointSetBC(X, y, component=0)
    data = dde.data.TimePDE(domain, residual(family, c, dde), [observe],
                            num_domain=int(spec["num_domain"]), anchors=X)
    outputs = 2 if family == "heat_source" else 1        # an unknown source: its own output
    net = dde.nn.FNN([X.shape[1]] + list(spec["net"]) + [outputs], "tanh", "Glorot uniform")
    model = dde.Model(data, net)
    trainable = list(variables.values())
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):      # DeepXDE's progress: not our answer
        model.compile("adam", lr=float(spec["lr"]), external_trainable_variables=trainable)
        model.train(iterations=int(spec["adam_iterations"]), display_every=100000)
        dde.optimizers.config.set_LBFGS_options(maxiter=int(spec["lbfgs_iterations"]))
        model.compile("L-BFGS", external_trainable_variables=trainable)
        model.train(display_every=100000)
    out = {"coefficients": {n: float(v.detach()) for n, v in variables.items()},
           "cpu_seconds": time.process_time() - cpu, "seconds": time.perf_counter() - wall,
           "versions": {"deepxde": dde.__version__, "torch": torch.__version__,
                        "backend": dde.backend.backend_name},
           "settings": {k: spec[k] for k in ("net", "adam_iterations", "lbfgs_iterations",
                                             "num_domain", "lr")} | {"threads": 1}}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
