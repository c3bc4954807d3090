"""Time one training step of PI-DKL and DKL (same process) for N x m cases; JSON lines.

    python benchmarks/step_time.py            # or: pidkl bench
"""

import argparse

from pyro_pidkl.bench import run_benchmark

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", default="250,500,1000,2000")
    p.add_argument("--m", default="10,100")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-autograd", action="store_true")
    a = p.parse_args()
    run_benchmark([int(v) for v in a.N.split(",")], [int(v) for v in a.m.split(",")],
                  a.repeats, a.threads, device=a.device, autograd=not a.no_autograd)
