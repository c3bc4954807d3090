"""One torch thread or several, against problem size, on a quiet machine and on a busy one.

Each (case, threads, machine) runs in a fresh process that sets its torch thread count
before any work; "busy" runs beside a process that keeps one core spinning (what a second
fit, a notebook kernel or a browser does to a two-core laptop). Seconds are the case's
build + fit + prediction, measured inside the process (imports excluded). Cases:

* ``readme``: the README's own equation (damped oscillator, 40 data, 200 collocation
  points, two coefficients learned, L-BFGS);
* ``quickstart``: the README's PI-DKL quick start (1000 Adam steps, m = 10);
* ``data300``, ``data1000``: the conditioned GP's data fit of ``solver_speed.py``'s heat
  problem with N = 300 and 1000 data, 200 collocation points;
* ``elliptic``: the nonlinear elliptic solve at h = 0.02 (2,601 points).

    python benchmarks/threads.py                    # every case, quiet and busy, 1 and 2 threads
    python benchmarks/threads.py --summary

Records: ``docs/results/threads.jsonl`` (one JSON line per run, with ``cpu_count``).
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "threads.jsonl")
CASES = ("readme", "quickstart", "data300", "data1000", "elliptic")


def _readme():
    import torch
    from torch.distributions import constraints
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter

    def damped_oscillator(f, x, omega, zeta):
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f

    eq = Equation(damped_oscillator, inputs=("t",), omega=Parameter(1.0),
                  zeta=Parameter(0.5, constraints.unit_interval))
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    model = pk.PhysicsConditionedGP(data.X_train, data.y_train, eq,
                                    domain=pk.Box(t=(0.0, 6.0)))
    pk.fit(model, progress=False)
    mean, _ = model(torch.as_tensor(data.X_test))
    return {"error": pk.diagnostics.rmse(mean, data.f_test)}


def _quickstart():
    import pyro
    import pyro_pidkl as pk
    from pyro_pidkl import physics
    data = pk.datasets.simulate_first_order_ode()
    pyro.set_rng_seed(0)
    model = pk.PIDKL(data.X_train, data.y_train, physics.first_order_ode(B=0.5, D=0.5),
                     gamma=1.0, m=10, domain=pk.Box(t=(0.0, 1.0)))
    pk.fit(model, num_steps=1000, lr=0.01, progress=False)
    mean, _ = model(data.X_test)
    return {"error": pk.diagnostics.rmse(mean, data.y_test)}


def _data(N):
    import solver_speed
    rec = solver_speed.case_data(N, None)
    return {"error": rec["rmse"]}


def _elliptic():
    import solver_speed
    rec = solver_speed.case_elliptic(0.02, None)
    return {"error": rec["rms"]}


def run_case(case):
    """Run one case in this process: ``{"seconds", "error"}``."""
    job = {"readme": _readme, "quickstart": _quickstart, "data300": lambda: _data(300),
           "data1000": lambda: _data(1000), "elliptic": _elliptic}[case]
    t0 = time.perf_counter()
    out = job()
    out["seconds"] = time.perf_counter() - t0
    return out


def _child(case, threads):
    import torch
    torch.set_num_threads(threads)
    os.environ["PIDKL_THREADS"] = str(threads)   # pk.fit's own default is one thread
    import pyro_pidkl  # noqa: F401  (imports outside the timing)
    print(json.dumps(run_case(case)))


def measure(case, threads, busy):
    """One run in a fresh process; with ``busy`` a spinning process beside it."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        out = subprocess.run([sys.executable, __file__, "--child", case, str(threads)],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PIDKL_PEER_SPARSE_CHOLESKY": ""})
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(path):
    recs = records.latest(records.read_records(path),
                          lambda r: (r["case"], r["threads"], r["machine"]))
    cases = [c for c in CASES if any(k[0] == c for k in recs)]
    lines = ["| case | quiet, 1 thread | quiet, 2 threads | busy, 1 thread | busy, 2 threads |",
             "|---|---|---|---|---|"]
    for c in cases:
        cells = []
        for machine in ("quiet", "busy"):
            for t in (1, 2):
                r = recs.get((c, t, machine))
                cells.append(f"{r['seconds']:.1f} s" if r else "")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--machines", default="quiet,busy")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args.child[0], int(args.child[1]))
    if not args.summary:
        commit = records.commit()
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "a") as fh:
            for case in args.cases.split(","):
                for machine in args.machines.split(","):
                    for t in (int(t) for t in args.threads.split(",")):
                        rec = measure(case, t, machine == "busy")
                        rec.update(case=case, threads=t, machine=machine,
                                   cpu_count=os.cpu_count(), commit=commit)
                        records.append(fh, rec)
                        print(f"{case:<11} {machine:<6} {t} thread(s): {rec['seconds']:7.2f} s "
                              f"(error {rec['error']:.3g})", flush=True)
    print(summary(args.out))


if __name__ == "__main__":
    main()
