"""The rule the development-twin studies use to choose a protocol option across tasks."""

import numpy as np

__all__ = ["TWIN_CHOICE", "mean_rank_choice"]

#: the simulations' first PI-DKL configuration, chosen on one development twin each
#: (``ode-dev``, ``diffusion-dev``) by the rule fixed in ``docs/studies/dev_protocol.py`` before
#: any candidate ran (records: ``docs/results/dev_protocol.jsonl``); not on the paper's
#: tasks. Replaced on both by the families' choices (``ODE_FAMILY_CHOICE``,
#: ``DIFFUSION_FAMILY_CHOICE`` in ``pyro_pidkl/paper/experiments.py``; its paper-task
#: records: ``docs/results/simulations_single_twin.json``)
TWIN_CHOICE = {"gamma": 1.0, "m": 10, "skip_inputs": True}


def mean_rank_choice(scores, options):
    """Choose across tasks by mean rank: on each task rank ``options`` by score (lower is
    better; ties in the order of ``options``), then take the lowest mean rank (ties again in
    that order). How the development twins choose a protocol.

    :param dict scores: ``{task: {option: score}}``.
    :param options: the options, in order of preference for ties.
    :returns: ``(chosen, {option: mean rank})``.
    """
    options = list(options)
    ranks = {o: [] for o in options}
    for task, row in scores.items():
        order = sorted(options, key=lambda o: (row[o], options.index(o)))
        for rank, o in enumerate(order, 1):
            ranks[o].append(rank)
    mean_rank = {o: float(np.mean(v)) for o, v in ranks.items()}
    return min(options, key=lambda o: (mean_rank[o], options.index(o))), mean_rank
