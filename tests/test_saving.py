"""Saving and loading: a fitted model of each kind, built in another process from an
equation defined in that process's own script (``__main__``, a lambda, a closure), is
loaded here and predicts identically; what cannot be stored is refused in one line."""

import json
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch

import pyro_pidkl as pk

D = torch.float64

SCRIPT = textwrap.dedent('''
    import json, sys, math
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter
    torch.set_num_threads(1)
    D = torch.float64
    out = sys.argv[1]
    COLUMN = ("pidkl", "sparse_pidkl", "dkl", "solver")
    rate = 0.7                                          # a global the equation reads

    def decay(f, x, k):                                  # defined in __main__
        return f.d("t") + k * f - rate * 0.0

    t = torch.linspace(0, 3, 12, dtype=D)
    y = torch.exp(-1.3 * t) + 0.01 * torch.randn(12, generator=torch.Generator().manual_seed(0), dtype=D)
    X_new = torch.linspace(0, 4, 7, dtype=D)
    models = {}
    eq = Equation(decay, inputs=("t",), k=Parameter(1.0))
    models["conditioned"] = pk.PhysicsConditionedGP(t, y, eq, domain=pk.Box(t=(0.0, 4.0)),
                                                    collocation=30)
    system = pk.EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"],), outputs=("u",),
                               inputs=("t",), k=1.0)
    models["system"] = pk.ConditionedSystemGP(system, {"u": (t, y)}, domain=pk.Box(t=(0.0, 4.0)),
                                              collocation=30)
    lam = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(1.0))
    models["pidkl"] = pk.PIDKL(t[:, None], y, lam, gamma=1.0, m=10, domain=pk.Box(t=(0.0, 4.0)))
    models["sparse_pidkl"] = pk.SparsePIDKL(t[:, None], y, lam, gamma=1.0, m=10,
                                            domain=pk.Box(t=(0.0, 4.0)), num_inducing=6)
    models["dkl"] = pk.models.DKL(t[:, None], y, input_names=("t",))
    grid = torch.linspace(0, 1, 14, dtype=D)[:, None]
    models["solver"] = pk.SparseCholeskySolver(grid[[0, -1]], torch.zeros(2, dtype=D),
                                               Equation(lambda f, x: -f.d("t", "t"), inputs=("t",)),
                                               grid[1:-1], source=lambda x: 0 * x["t"] + 2.0)
    steps = {"num_steps": 30, "lr": 0.01}
    fits = {"conditioned": {}, "system": {}, "pidkl": steps, "sparse_pidkl": steps, "dkl": steps}
    preds = {}
    for name, model in models.items():
        if name != "solver":
            pk.fit(model, progress=False, **fits[name])
        got = model(X_new[:, None] / (4.0 if name == "solver" else 1.0)
                    if name in COLUMN else X_new)
        mean, var = got[:2] if isinstance(got, tuple) else (got, torch.zeros_like(got))
        preds[name] = [mean.tolist(), var.tolist()]
        pk.save(model, f"{out}/{name}.pt")
    json.dump(preds, open(f"{out}/preds.json", "w"))
''')


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_fitted_models_reload_in_another_process_and_predict_identically(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    preds = json.loads((tmp_path / "preds.json").read_text())
    X_new = torch.linspace(0, 4, 7, dtype=D)
    assert len(preds) == 6
    for name, (mean, var) in preds.items():
        model = pk.load(tmp_path / f"{name}.pt")
        out = model(X_new[:, None] / (4.0 if name == "solver" else 1.0)
                    if name in ("pidkl", "sparse_pidkl", "dkl", "solver") else X_new)
        m, v = out[:2] if isinstance(out, tuple) else (out, torch.zeros_like(out))
        # identical up to the rounding of a Laplace step recomputed (sigma points)
        torch.testing.assert_close(m, torch.tensor(mean, dtype=D), rtol=1e-9, atol=0)
        torch.testing.assert_close(v, torch.tensor(var, dtype=D), rtol=1e-7, atol=0)
    again = pk.load(tmp_path / "conditioned.pt")
    assert abs(again.equation_parameters()["k"] - 1.3) < 0.2     # the fitted coefficient


def test_what_cannot_be_stored_and_what_is_no_model_file_are_refused_in_one_line(tmp_path):
    lock = threading.Lock()

    def holds_a_lock(f, x, k):
        with lock:
            return f.d("t") + k * f
    eq = pk.Equation(holds_a_lock, inputs=("t",), k=pk.Parameter(1.0))
    t = torch.linspace(0, 1, 5, dtype=D)
    model = pk.PhysicsConditionedGP(t, torch.exp(-t), eq, collocation=10)
    with pytest.raises(TypeError, match="cannot be stored") as info:
        pk.save(model, tmp_path / "m.pt")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "m.pt").exists()
    with pytest.raises(TypeError, match="Expected a pyro_pidkl model"):
        pk.save({"not": "a model"}, tmp_path / "x.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="written by pyro_pidkl.save"):
        pk.load(tmp_path / "junk.pt")


def test_a_model_never_fitted_warns_once_when_it_predicts_and_a_fitted_one_does_not():
    t = torch.linspace(0, 1, 8, dtype=D)
    model = pk.models.ExactGP(t[:, None], torch.sin(3 * t), input_names=("t",))
    with pytest.warns(pk.UnfittedModelWarning, match="never fitted by pk.fit"):
        model(t[:, None])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(t[:, None])                                   # once only
        fitted = pk.models.ExactGP(t[:, None], torch.sin(3 * t), input_names=("t",))
        pk.fit(fitted, num_steps=5, progress=False)
        fitted(t[:, None])


def test_a_file_that_names_a_class_where_it_was_before_the_models_moved_loads(tmp_path):
    """Files saved before ``pyro_pidkl.models`` was split into folders name the classes by
    their old modules (``pyro_pidkl.models.conditioned``); they load as the classes now."""
    import pickle

    import pyro_pidkl as pk
    from pyro_pidkl.saving import FORMAT

    def old_file(module, name):       # protocol 2: a dict whose "model" is the class itself
        return (b"\x80\x02}q\x00(X\x06\x00\x00\x00formatq\x01X" + len(FORMAT).to_bytes(4, "little")
                + FORMAT.encode() + b"q\x02X\x05\x00\x00\x00modelq\x03c" + module.encode()
                + b"\n" + name.encode() + b"\nq\x04u.")

    for module, name, cls in [("pyro_pidkl.models.conditioned", "PhysicsConditionedGP",
                               pk.PhysicsConditionedGP),
                              ("pyro_pidkl.models.system", "ConditionedSystemGP",
                               pk.ConditionedSystemGP),
                              ("pyro_pidkl.models.exact_gp", "ExactGP", pk.models.ExactGP),
                              ("pyro_pidkl.models.sparse_solver", "SparseCholeskySolver",
                               pk.SparseCholeskySolver)]:
        path = tmp_path / f"{name}.pt"
        path.write_bytes(old_file(module, name))
        assert pk.load(path) is cls
    with pytest.raises(ModuleNotFoundError):           # plain pickle no longer finds it
        pickle.loads(old_file("pyro_pidkl.models.conditioned", "PhysicsConditionedGP"))
