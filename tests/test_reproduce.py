import json

import pyro
import pytest

from pyro_pidkl.paper.cli import main
from pyro_pidkl.paper.experiments import EXPERIMENTS
from pyro_pidkl.paper.reproduce import format_table, markdown_table, reproduce, run_one, summarize

KEYS = {"experiment", "method", "seed", "rmse", "nrmse", "test_lpd", "coverage95",
        "fit_seconds", "hyper"}


def test_reproduce_writes_records_table_and_figure(tmp_path):
    records = reproduce("ode", ["pidkl-cv", "dkl", "pidkl"], [0, 1], num_steps=4,
                        out=tmp_path, progress=False)
    assert [(r["method"], r["seed"]) for r in records] == [
        ("pidkl-cv", 0), ("pidkl-cv", 1), ("dkl", 0), ("dkl", 1), ("pidkl", 0), ("pidkl", 1)]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved) == 6 and all(KEYS <= set(r) for r in saved)
    hyper = saved[0]["hyper"]
    assert hyper["gamma"] in (0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10) and hyper["m"] == 10
    assert hyper["initial"] == {"B": 0.5, "D": 0.5} and set(hyper["learned"]) == {"B", "D"}
    assert len(hyper["cv_rmse"]) == 8 and hyper["steps"] == 4
    fixed = saved[4]["hyper"]   # pidkl: the configuration chosen on the development twins
    assert fixed["cv"] is None and "cv_rmse" not in fixed
    declared = EXPERIMENTS["ode"].protocol.fixed
    assert {k: fixed.get(k) for k in declared} == declared
    assert (tmp_path / "ode.png").stat().st_size > 10_000
    assert (tmp_path / "ode_calibration.png").exists() and (tmp_path / "ode_comparison.png").exists()
    assert set(saved[0]["coverage"]) == {"0.5", "0.8", "0.9", "0.95"}
    assert saved[0]["coverage"]["0.95"] == saved[0]["coverage95"]
    assert abs(saved[2]["loo_elpd"] - saved[2]["loo_elpd_exact"]) < 5.0
    table = format_table(saved)
    assert "pidkl" in table and "gamma chosen" in table
    rows = summarize(saved)
    assert {r["method"]: r["seeds"] for r in rows} == {"pidkl": 2, "pidkl-cv": 2, "dkl": 2}
    assert {r["method"]: r.get("selected") for r in rows} == {
        "pidkl": "fixed", "pidkl-cv": "CV", "dkl": None}
    # a second experiment in the same folder keeps the first one's records
    reproduce("diffusion", ["skl"], [0], num_steps=3, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {r["experiment"] for r in saved} == {"ode", "diffusion"} and len(saved) == 7
    assert (tmp_path / "diffusion.png").exists()
    table = markdown_table(saved)
    assert table.count("\n") == 1 + 4 + 2   # header, rule, 4 rows; the steps footnote
    assert "| ode | pidkl [4 steps*] | 2 |" in table and "not a protocol result" in table


def test_reproduce_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="Unknown experiment"):
        reproduce("heat", out=tmp_path)
    with pytest.raises(ValueError, match="Unknown method"):
        reproduce("ode", ["lfm7"], out=tmp_path)


def test_lfm_stands_for_every_latent_force_model_and_reports_its_parameter(tmp_path):
    records = reproduce("ode", ["lfm"], [0], num_steps=3, out=tmp_path, progress=False,
                        figures=False)
    assert [r["method"] for r in records] == ["lfm1", "lfm3", "lfm5"]
    assert all(set(r["hyper"]["learned"]) == {"D"} for r in records)


@pytest.mark.parametrize("name", ["jura-cd", "jura-cu", "pm25", "burgers", "diffusion"])
def test_every_method_of_the_new_experiments_builds_and_predicts(name, monkeypatch):
    from conftest import reference_dir

    from pyro_pidkl.paper.experiments import EXPERIMENTS, build_model

    experiment = EXPERIMENTS[name]
    if name == "pm25":
        monkeypatch.setenv("PIDKL_PM25", str(reference_dir() / "pm25"))
    try:
        data = experiment.data(0)
    except FileNotFoundError as e:
        pytest.skip(f"{name}: data not found ({str(e).splitlines()[0]})")
    X, y = data.X_train[:40], data.y_train[:40]
    for method in experiment.methods:
        pyro.clear_param_store()  # models share param-store names (kernel.kern.lengthscale)
        model = build_model(method, experiment, X, y, data.input_names)
        mean, var = model(data.X_test[:5])
        assert mean.shape == (5,) and (var > 0).all(), method


@pytest.mark.slow
def test_cli_reproduce_and_table(tmp_path, capsys):
    assert main(["reproduce", "ode", "--methods", "skl", "--seeds", "0-1", "--steps", "3",
                 "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "skl" in out and "results.json" in out
    assert main(["table", str(tmp_path / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "| ode | skl [3 steps*] | 2 |" in out and "PSIS-LOO" in out


@pytest.mark.parametrize("cv_score", ["rmse", "lpd"])
def test_cross_validation_picks_the_best_configuration_by_the_chosen_score(cv_score):
    record = run_one("ode", "pidkl-cv", 0, num_steps=3, cv_score=cv_score)
    hyper = record["hyper"]
    assert hyper["cv_score"] == cv_score
    chosen = json.dumps({"gamma": hyper["gamma"], "m": hyper["m"]})
    if cv_score == "rmse":
        assert hyper["cv_rmse"][chosen] == min(hyper["cv_rmse"].values())
    else:
        assert hyper["cv_lpd"][chosen] == max(hyper["cv_lpd"].values())


@pytest.mark.slow
def test_the_documented_simulation_records_come_from_this_code(tmp_path):
    """The README's main job (`pidkl reproduce ode`) and docs/paper.md's table are its
    records in docs/results/simulations.json: rerunning one of them (PI-DKL, seed 0, the
    protocol's steps, one torch thread) gives the recorded numbers, to 0.5%: the same code on
    another processor rounds differently along 1,000 optimiser steps (an AMD EPYC's RMSE
    0.09519 against the record's 0.09533, 0.15% apart). A change that moves them further
    fails here until the records and the table are made again."""
    from pathlib import Path
    recorded = {(r["experiment"], r["method"], r["seed"]): r for r in json.loads(
        (Path(__file__).resolve().parents[1] / "docs" / "results" / "simulations.json")
        .read_text())}
    rec = recorded[("ode", "pidkl", 0)]
    assert rec.get("threads") == 1 and rec.get("commit"), "records without provenance"
    again = reproduce("ode", ["pidkl"], [0], out=tmp_path, jobs=1, progress=False,
                      figures=False)[0]
    for key in ("rmse", "crps"):
        assert again[key] == pytest.approx(rec[key], rel=5e-3), (key, again[key], rec[key])
    # coverage is a count of the 901 test points: an Intel Xeon's band holds one point fewer
    # than the record's (0.05438 against 0.05549); two points either way
    assert again["coverage95"] == pytest.approx(rec["coverage95"], abs=2 / 901), (
        again["coverage95"], rec["coverage95"])
