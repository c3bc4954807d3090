import pytest
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pyro_pidkl as pk
from pyro_pidkl.paper.cli import main


def test_public_api_is_importable():
    for name in pk.__all__:
        assert hasattr(pk, name), name
    for name in ("PIDKL", "PhysicsConditionedGP", "fit", "physics", "datasets", "models"):
        assert name in pk.__all__


def test_public_api_is_narrow_and_former_names_still_resolve():
    """The top level holds the model family, its parts, ``fit``, ``save``/``load``, the errors
    and the population models (at most 45 names besides the subpackages); every name it
    exported before still resolves, to the same object as its subpackage's, with a
    DeprecationWarning naming that path."""
    names = [n for n in pk.__all__ if n not in pk._SUBPACKAGES and n != "__version__"]
    assert len(names) <= 45, len(names)
    assert not set(pk._FORMER) & set(pk.__all__)
    for name, package in pk._FORMER.items():
        with pytest.warns(DeprecationWarning, match=f"pyro_pidkl.{package}.{name}"):
            value = getattr(pk, name)
        assert value is getattr(getattr(pk, package), name), name
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        pk.nonexistent


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
    :mod:`pyro_pidkl.paper`, ``benchmarks`` or the studies."""
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


@pytest.mark.slow
def test_cli_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "pyro_pidkl", "fit", "diffusion", "--steps", "3",
                          "--methods", "pidkl", "--quiet"], capture_output=True, text=True,
                         check=True)
    assert "pidkl" in out.stdout and "alpha=" in out.stdout


OSCILLATOR = '''
from torch.distributions import constraints
from pyro_pidkl.physics import Equation, Parameter

def damped_oscillator(f, x, omega, zeta):
    return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f

equation = Equation(damped_oscillator, inputs=("t",), omega=Parameter(1.0),
                    zeta=Parameter(0.5, constraints.unit_interval))
'''


def _oscillator_files(tmp_path):
    import numpy as np
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    obs = tmp_path / "obs.csv"
    np.savetxt(obs, np.c_[np.asarray(data.X_train)[:, 0], np.asarray(data.y_train)],
               delimiter=",", header="t,y", comments="")
    eq = tmp_path / "oscillator.py"
    eq.write_text(OSCILLATOR)
    return obs, eq, data


def test_cli_fits_your_equation_to_your_csv(tmp_path, capsys):
    """``pidkl fit --data --equation FILE.py``: the conditioned GP at its defaults learns the
    oscillator's coefficients and writes predictions beyond the data that match the truth."""
    import numpy as np
    obs, eq, data = _oscillator_files(tmp_path)
    pred = tmp_path / "pred.csv"
    assert main(["fit", "--data", str(obs), "--equation", str(eq), "--domain", "t=0:6",
                 "--grid", "61", "--out", str(pred), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    c = summary["coefficients"]
    assert abs(c["omega"]["value"] - 2.0) < 0.05 and abs(c["zeta"]["value"] - 0.15) < 0.02
    assert c["omega"]["lower"] < 2.0 < c["omega"]["upper"]
    assert summary["model"] == "pcgp" and summary["n"] == 40 and summary["threads"] >= 1
    table = np.genfromtxt(pred, delimiter=",", names=True)
    assert table.dtype.names == ("t", "mean", "sd", "lower", "upper") and len(table) == 61
    import torch
    truth = pk.datasets.problem("oscillator").solution(torch.as_tensor(table["t"])[:, None])
    truth = truth.detach().numpy()
    beyond = table["t"] > 2.4
    assert np.sqrt(np.mean((table["mean"][beyond] - truth[beyond]) ** 2)) < 0.05
    assert np.all(table["lower"] <= table["upper"])


GROWTH = """from pyro_pidkl.physics import Equation, Parameter

growth = Equation(lambda f, x, r: f.d("t") - r, inputs=("t",), r=Parameter(1.0))
"""


def test_cli_fits_counts_with_a_count_likelihood(tmp_path, capsys):
    """``pidkl fit --data counts.csv --likelihood poisson``: f is the log of the counts'
    mean, growing at rate r (truth 0.3); the fit's r is the exact Poisson GLM's (log mu = a +
    r t by maximum likelihood) to a tenth of its standard error."""
    import numpy as np
    import scipy.optimize
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 6.0, 30)
    y = rng.poisson(5.0 * np.exp(0.3 * t))
    obs = tmp_path / "counts.csv"
    obs.write_text("t,cases\n" + "".join(f"{a},{b}\n" for a, b in zip(t, y)))
    eq = tmp_path / "growth.py"
    eq.write_text(GROWTH)
    assert main(["fit", "--data", str(obs), "--equation", str(eq), "--likelihood", "poisson",
                 "--json", "--quiet"]) == 0
    r = json.loads(capsys.readouterr().out)["coefficients"]["r"]
    A = np.c_[np.ones_like(t), t]
    glm = scipy.optimize.minimize(lambda p: -(y * (A @ p) - np.exp(A @ p)).sum(), [1.0, 0.1],
                                  method="BFGS")
    mu = np.exp(A @ glm.x)
    se = np.sqrt(np.linalg.inv(A.T @ (mu[:, None] * A))[1, 1])
    assert abs(r["value"] - glm.x[1]) < 0.1 * se
    assert r["lower"] < glm.x[1] < r["upper"]
    assert main(["fit", "--data", str(obs), "--equation", str(eq), "--likelihood", "poisson",
                 "--model", "pidkl", "--quiet"]) == 1
    assert "with model 'pcgp' only" in capsys.readouterr().err


def test_cli_refuses_what_does_not_fit_in_one_line(tmp_path, capsys):
    obs, eq, _ = _oscillator_files(tmp_path)
    broken = tmp_path / "broken.py"
    broken.write_text("from pyro_pidkl.physics import Equation\n\ndef psi(f, x:\n    return f\n")
    raising = tmp_path / "raising.py"
    raising.write_text("from pyro_pidkl.physics import Equation\n\n\nk = Parameterr(1.0)\n")
    cases = [
        (["fit", "--data", str(obs), "--equation", "nope.py"], "built-in equation"),
        (["fit", "--data", str(obs), "--equation", str(eq), "--domain", "t=0-6"],
         "NAME=LOW:HIGH"),
        (["fit", "--data", str(obs), "--equation", str(eq), "--target", "z"],
         "target column 'z'"),
        (["fit", "--data", str(obs), "--equation", "heat_1d"], "input columns"),
        (["fit", "--data", str(obs), "--equation", "first_order_ode", "--param", "B"],
         "NAME=VALUE"),
        (["fit", "--data", str(tmp_path / "none.csv"), "--equation", str(eq)], "not a file"),
        # checked before the fit, not after it
        (["fit", "--data", str(obs), "--equation", str(eq), "--grid", "5", "--out",
          str(tmp_path / "missing" / "pred.csv")], "folder of --out"),
        (["fit", "--data", str(obs), "--equation", str(eq), "--predict",
          str(tmp_path / "none.csv")], "is not a file"),
        (["fit", "--data", str(obs), "--equation", str(broken)], "line 3: SyntaxError"),
        (["fit", "--data", str(obs), "--equation", str(raising)],
         "line 4 raised NameError: name 'Parameterr' is not defined"),
    ]
    for argv, message in cases:
        assert main(argv + ["--quiet"]) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


def test_cli_help_reads_as_user_text():
    out = subprocess.run([sys.executable, "-m", "pyro_pidkl", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "``" not in out and "imports torch" not in out
    fit_help = subprocess.run([sys.executable, "-m", "pyro_pidkl", "fit", "--help"],
                              capture_output=True, text=True, check=True).stdout
    assert "(default: pcgp)" in fit_help and "--data" in fit_help
    listed = fit_help.split("examples and their methods")[1].split("Also accepted")[0]
    assert "ode-dev" not in listed and "pcgp" in listed


def _interrupted(argv, after):
    """Run ``pidkl argv`` in its own process group, send Ctrl-C's SIGINT to the whole group
    after ``after`` seconds (as a terminal does), and return ``(returncode, output)``."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "pyro_pidkl", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(after)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:                 # never leave it running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


@pytest.mark.slow
def test_ctrl_c_ends_a_fit_and_a_reproduce_run_in_one_line(tmp_path):
    code, out = _interrupted(["fit", "ode", "--methods", "pidkl", "--steps", "100000",
                              "--quiet"], 12)
    assert code == 130 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1].startswith("pidkl fit: interrupted"), out
    code, out = _interrupted(["reproduce", "ode", "--methods", "pidkl", "--seeds", "0-19",
                              "--jobs", "2", "--out", str(tmp_path), "--quiet"], 15)
    assert code == 130 and "Traceback" not in out and "leaked" not in out, out
    assert "pidkl reproduce: interrupted" in out, out
