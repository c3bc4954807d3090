"""The conditioning of the random ODE benchmark's initial-value problems
(:mod:`pyro_pidkl.infer.ivp_conditioning`): the amplification kappa of each drawn problem at
its true coefficients along its true trajectory, beside the refusal threshold, to show that
the exact-ODE referee steps aside only where its likelihood cannot be computed.

    python benchmarks/ivp_conditioning.py --seeds 13,59,61,67,71,73 --problems 8
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def kappa_of(problem):
    import random_odes as ro
    from pyro_pidkl.infer.ivp_conditioning import amplification
    from pyro_pidkl.physics import explicit_ode
    from pyro_pidkl.physics.scalar_ode import equation_ode
    eq, _, _ = ro.user_problem(problem)
    ode = (equation_ode(eq, ("t",), None) if problem["family"] in ("growth", "oscillator")
           else explicit_ode(eq))
    times = np.linspace(0.0, float(problem["t"][-1]), 64)
    x0 = np.asarray(problem["x0"], dtype=float)
    path = ro._solve(ro.numpy_rhs(problem, {**problem.get("held", {}), **problem["truth"]}),
                     list(x0), times)
    if path is None:
        return ode, float("nan")
    scale = np.sqrt(np.mean(path ** 2, 1))
    return ode, amplification(ode, x0, problem["truth"], (times, path), scale)


def main(argv=None):
    import random_odes as ro
    from pyro_pidkl.infer.ivp_conditioning import ERROR_MAX, INTEGRATOR_ERROR, ROUNDING
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="13,59,61,67,71,73")
    parser.add_argument("--problems", type=int, default=8)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    worst = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for i in range(args.problems):
            problem = ro.draw(seed, i, ro.FAMILIES)
            ode, kappa = kappa_of(problem)
            limit = ERROR_MAX / (ROUNDING if ode.affine else INTEGRATOR_ERROR)
            worst.append(kappa / limit)
            print(f"seed {seed:3d} problem {i}  {problem['family']:10s} "
                  f"{problem.get('law', ''):28s} kappa {kappa:10.3g}  refused above "
                  f"{limit:.0e}")
    print(f"{len(worst)} problems: largest kappa / threshold {np.nanmax(worst):.2e}; refused "
          f"{int(np.sum(np.asarray(worst) > 1))}")


if __name__ == "__main__":
    main()
