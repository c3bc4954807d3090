"""How to use restarts of the 1stODE configuration, asked again on the family of 1stODE twins.

Why: ``docs/studies/dev_restarts.py`` chose ``best`` (the restart with the lowest training
objective) for ``TWIN_CHOICE`` on ode-dev, ode-dev2 and diffusion-dev. The 1stODE has since
run another configuration (``ODE_FAMILY_CHOICE``: gamma = 1, m = 30, plain deep kernel,
chosen on six twins by ``docs/studies/dev_family.py``), and on those twins every single fit of
it was overconfident (median 95% coverage 0.01-0.14). This script asks the same question as
``dev_restarts.py`` for the present configuration, on the six twins of ``dev_family.py``:

* ``single``: restart 0 alone (``pidkl``);
* ``best``: the lowest training objective (``pidkl-best``);
* ``ensemble``: the moment-matched mixture of the 5 restarts (``pidkl-ens``).

All three come from the same 5 restarts (seeded ``seed + 1000 r``). Seeds 0-2. The rule,
fixed in this file before it first ran:

    on each twin rank the three by median test CRPS (1 = lowest; ties: single, best,
    ensemble); the lowest mean rank over the six twins is the 1stODE's use of restarts
    (reported as the protocol's method next to ``pidkl``).

What was known when this was written: on the paper's 1stODE, ``single`` (0.0485, coverage
0.70) and ``best`` (0.0221, coverage 1.00) have run; ``ensemble`` has not.

    python docs/studies/dev_family_restarts.py > docs/results/dev_family_restarts.jsonl
"""

import dev_family
import dev_restarts

#: in tie-breaking order
COMBINATIONS = ("single", "best", "ensemble")


def run(task, seed):
    import torch
    torch.set_num_threads(1)
    dev_family.register_twins()   # the twins run the 1stODE's fixed ODE_FAMILY_CHOICE
    return dev_restarts.score_restarts(task, seed)


def main(argv=None):
    dev_restarts.main(argv, run=run, tasks=["ode-dev", "ode-dev2", *dev_family.family_twins()],
                      seeds="0,1,2", combinations=COMBINATIONS,
                      rule="rank by median test CRPS per twin; lowest mean rank over the "
                           "six twins; ties: single, best, ensemble", description=__doc__)


if __name__ == "__main__":
    main()
