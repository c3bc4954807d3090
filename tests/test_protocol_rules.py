"""Checks of the selection rule the protocol studies (``docs/studies/``) use to choose an option
across development twins."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "studies"))
import dev_restarts  # noqa: E402
from protocol_rules import mean_rank_choice  # noqa: E402


def test_the_twin_rule_for_restarts_ranks_by_median_crps_and_breaks_ties_toward_single():
    def rows(single, ensemble, best):
        return {"single": single, "ensemble": ensemble, "best": best}

    def choose(summary):   # what the script's main applies, with its tie order
        return mean_rank_choice(summary, dev_restarts.COMBINATIONS)

    chosen, ranks = choose({"a": rows(0.3, 0.2, 0.1), "b": rows(0.1, 0.2, 0.3)})
    assert ranks == {"single": 2.0, "ensemble": 2.0, "best": 2.0} and chosen == "single"
    chosen, ranks = choose({"a": rows(0.3, 0.2, 0.1), "b": rows(0.2, 0.1, 0.3),
                            "c": rows(0.2, 0.2, 0.1)})
    # equal CRPS on "c": single ranks before ensemble
    assert ranks == pytest.approx({"single": 7 / 3, "ensemble": 2.0, "best": 5 / 3})
    assert chosen == "best"
