import functools

import numpy as np
import pytest

import pyro_pidkl as pk
from pyro_pidkl import physics


def test_kfold_splits_partition_the_data():
    splits = pk.infer.kfold_splits(23, k=5, seed=1)
    vals = np.concatenate([v for _, v in splits])
    assert sorted(vals.tolist()) == list(range(23))
    for tr, va in splits:
        assert set(tr).isdisjoint(va) and len(tr) + len(va) == 23
    with pytest.raises(ValueError, match="2 <= k <= n"):
        pk.infer.kfold_splits(3, k=5)


def test_holdout_keeps_the_last_part_along_an_input():
    X = np.array([[0.3], [0.1], [0.9], [0.5], [0.7]])
    ((tr, va),) = pk.infer.holdout_split(X, column=0, fraction=0.4)
    assert sorted(va.tolist()) == [2, 4] and sorted(tr.tolist()) == [0, 1, 3]


def _build(X, y, gamma, m):
    return pk.PIDKL(X, y, physics.first_order_ode(), gamma=gamma, m=m)


def _data():
    t = np.linspace(0, 1, 16)[:, None]
    return t, np.exp(-2 * t[:, 0])


def test_cross_validate_scores_every_configuration_on_training_data():
    X, y = _data()
    res = pk.infer.cross_validate(_build, X, y, {"gamma": [0.0, 1.0], "m": [5]},
                            splits=pk.infer.kfold_splits(16, 3),
                            fit_kwargs={"num_steps": 20, "lr": 0.02, "seed": 0})
    assert len(res.table) == 2 and res.best in [r["config"] for r in res.table]
    best_row = min(res.table, key=lambda r: r["rmse"])
    assert res.best == best_row["config"]
    assert all(len(r["per_split"]) == 3 and not r["errors"] for r in res.table)


@pytest.mark.slow
def test_cross_validate_in_two_processes_matches_one_process():
    X, y = _data()
    kw = dict(grid={"gamma": [0.1, 1.0], "m": [5]}, splits=pk.infer.holdout_split(X, 0, 0.25),
              fit_kwargs={"num_steps": 10, "lr": 0.02, "seed": 0})
    one = pk.infer.cross_validate(functools.partial(_build), X, y, jobs=1, **kw)
    two = pk.infer.cross_validate(functools.partial(_build), X, y, jobs=2, **kw)
    assert one.best == two.best
    np.testing.assert_allclose([r["rmse"] for r in one.table], [r["rmse"] for r in two.table],
                               rtol=1e-8)


def test_cross_validate_reports_failed_configurations():
    X, y = _data()
    res = pk.infer.cross_validate(_build, X, y, {"gamma": [1.0], "m": [0, 5]},
                            splits=pk.infer.kfold_splits(16, 2), fit_kwargs={"num_steps": 2})
    assert res.best == {"gamma": 1.0, "m": 5}
    assert "m (number of collocation points)" in res.table[0]["errors"][0]
    with pytest.raises(ValueError, match="score"):
        pk.infer.cross_validate(_build, X, y, {"gamma": [1.0]}, score="mae")
