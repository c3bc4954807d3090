import json
import subprocess
import sys

import pyro_pidkl as pk
from pyro_pidkl.cli import main


def test_public_api_is_importable():
    for name in pk.__all__:
        assert hasattr(pk, name), name
    for name in ("PIDKL", "fit", "physics", "datasets", "baselines"):
        assert name in pk.__all__
    assert pk.baselines.DKL is pk.DKL and pk.baselines.SKL is pk.SKL


def test_core_imports_no_study_module():
    """``import pyro_pidkl`` loads the library, not the paper's study (experiments, the
    reproduction, benchmarks, the CLI)."""
    code = ("import sys, pyro_pidkl; "
            "study = ('experiments', 'reproduce', 'bench', 'cli', 'selection_study'); "
            "print([m for m in sys.modules if m.startswith('pyro_pidkl.') "
            "and m.split('.')[1] in study])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_cli_fit_prints_json_records(capsys):
    assert main(["fit", "ode", "--steps", "5", "--methods", "pidkl,dkl,skl", "--json",
                 "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in rows] == ["pidkl", "dkl", "skl"]
    for r in rows:
        assert r["experiment"] == "ode" and r["steps"] == 5
        assert 0 <= r["coverage95"] <= 1 and r["rmse"] > 0
    assert set(rows[0]["learned"]) == {"B", "D"} and rows[0]["initial"] == {"B": 0.5, "D": 0.5}


def test_cli_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "pyro_pidkl", "fit", "diffusion", "--steps", "3",
                          "--methods", "pidkl", "--quiet"], capture_output=True, text=True,
                         check=True)
    assert "pidkl" in out.stdout and "alpha=" in out.stdout
