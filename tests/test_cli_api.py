import ast
import json
import subprocess
import sys
from pathlib import Path

import pyro_pidkl as pk
from pyro_pidkl.paper.cli import main


def test_public_api_is_importable():
    for name in pk.__all__:
        assert hasattr(pk, name), name
    for name in ("PIDKL", "PhysicsTerm", "fit", "physics", "datasets", "models", "kernels"):
        assert name in pk.__all__


def test_core_imports_no_study_module():
    """``import pyro_pidkl`` loads the library, not the paper's study (:mod:`pyro_pidkl.paper`:
    experiments, the reproduction, the CLI)."""
    code = ("import sys, pyro_pidkl; "
            "print(sorted(m for m in sys.modules if m.startswith('pyro_pidkl.paper')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_no_core_module_refers_to_the_study():
    """No import statement of the core (anywhere in a module, lazy ones included) names
    :mod:`pyro_pidkl.paper`, ``benchmarks`` or ``studies``."""
    root = Path(pk.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if "paper" in path.relative_to(root).parts or path.name == "__main__.py":
            continue
        package = ["pyro_pidkl", *path.relative_to(root).parent.parts]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
                names += [f"{names[0]}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.startswith(("pyro_pidkl.paper", "benchmarks", "studies")) for n in names):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []


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
