"""Nothing lost, nothing silent: bad input answered by a one-line error, interrupted runs that
keep their finished fits, and seeds that reproduce a fit."""

import copy
import math
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyro
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl import physics
from pyro_pidkl.paper.cli import main as cli
from pyro_pidkl.paper.reproduce import read_records, reproduce

T = np.linspace(0, 1, 12)[:, None]
Y = np.exp(-T[:, 0])
XT = np.stack(np.meshgrid(np.linspace(0, 1, 4), np.linspace(0, 1, 3)), -1).reshape(-1, 2)
YT = np.sin(XT[:, 0]) + XT[:, 1]


def _ode(X=T, y=Y, **kw):
    return pk.PIDKL(X, y, physics.first_order_ode(), **kw)


def _decay():
    def decay(f, x, k):
        return f.d("t") + k * f
    return physics.Equation(decay, inputs=("t",), k=physics.Parameter(1.0))


def _spring():
    def spring(f, x, k, c):
        return (f["x"].d("t") - f["v"], f["v"].d("t") + k * f["x"] + c * f["v"])
    return pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)


def _psi_model(psi):
    return pk.PIDKL(T, Y, physics.Equation(psi, inputs=("t",)), m=4)


BAD_INPUTS = {
    # models and the physics term
    "gamma negative": (lambda: _ode(gamma=-1), ValueError, "gamma >= 0"),
    "gamma text": (lambda: _ode(gamma="big"), TypeError, "gamma to be a number"),
    "m zero": (lambda: _ode(m=0), ValueError, "m \\(number of collocation points\\)"),
    "m bool": (lambda: _ode(m=True), ValueError, "integer >= 1"),
    "draw unknown": (lambda: _ode(draw="each"), ValueError, "draw to be one of"),
    "equation not an Equation": (lambda: pk.PIDKL(T, Y, lambda f, x: f), TypeError,
                                 "pyro_pidkl.physics.Equation"),
    "physics not a term": (lambda: pk.models.SKL(T, Y, physics="heat"), TypeError, "PhysicsTerm"),
    "kernel not a kernel": (lambda: pk.models.ExactGP(T, Y, kernel=3), TypeError,
                            "pyro.contrib.gp"),
    "X with NaN": (lambda: pk.models.SKL(np.array([[0.0], [np.nan]]), [1.0, 2.0]), ValueError,
                   "finite values in X"),
    "y of the wrong length": (lambda: pk.models.SKL(T, Y[:5]), ValueError, "y to have shape"),
    "X three-dimensional": (lambda: pk.models.SKL(np.zeros((2, 2, 2)), [0.0, 1.0]), ValueError,
                            "X to have shape"),
    "X not numbers": (lambda: pk.models.SKL([["a"], ["b"]], [0.0, 1.0]), TypeError,
                      "array of numbers"),
    "noise below its floor": (lambda: pk.models.SKL(T, Y, noise=1e-5), ValueError,
                              "exceed noise_floor"),
    "mean unknown": (lambda: pk.models.SKL(T, Y, mean="linear"), ValueError,
                     "'zero' or 'constant'"),
    "derivatives unknown": (lambda: pk.models.SKL(T, Y, derivatives="numeric"), ValueError,
                            "'closed_form' or 'autograd'"),
    "input order ambiguous": (lambda: pk.PIDKL(XT, YT, physics.heat_1d()), ValueError,
                              "column order cannot be guessed"),
    "unknown input in the equation": (lambda: pk.PIDKL(T, Y, physics.heat_1d(),
                                                       input_names=("t",)),
                                      ValueError, "unknown"),
    "num_inducing zero": (lambda: pk.models.SparseGP(T, Y, num_inducing=0), ValueError,
                          "num_inducing"),
    "batch_size fractional": (lambda: pk.models.SparseGP(T, Y, batch_size=2.5), ValueError,
                              "batch_size"),
    "inducing on the domain without physics": (
        lambda: pk.models.SparseGP(T, Y, inducing_init="domain"), ValueError, "inducing_init='data'"),
    "seed negative": (lambda: _ode(seed=-1), ValueError, "seed to be an integer >= 0"),
    # psi
    "psi returns a scalar": (lambda: _psi_model(lambda f, x: f.d("t").sum()), ValueError,
                             "shape \\(2,\\), one residual per point"),
    "psi returns numpy": (lambda: _psi_model(lambda f, x: np.zeros(2)), TypeError,
                          "torch tensor .*got ndarray"),
    "psi returns None": (lambda: _psi_model(lambda f, x: None), TypeError, "got NoneType"),
    "psi detached from f": (lambda: _psi_model(lambda f, x: f.d("t").detach()), ValueError,
                            "depend on f"),
    # the conditioned GPs: what no fit can mend, refused before the fit
    "conditioned data all zero": (lambda: pk.PhysicsConditionedGP(T, 0 * Y, _decay()), ValueError,
                                  "not zero everywhere; got every datum 0 and equation 'decay' "
                                  "zero at f = 0"),
    "system data all zero": (lambda: pk.ConditionedSystemGP(_spring(), {"x": (T[:, 0], 0 * Y)}),
                             ValueError, "got every datum 0 and system 'spring' zero at f = 0"),
    "condition value NaN": (lambda: pk.PhysicsConditionedGP(
        T, Y, _decay(), conditions=[physics.Condition([[0.0]], lambda f, x: f, float("nan"),
                                                      name="start")]),
        ValueError, "finite values of condition 'start'; got 1 NaN/inf"),
    # fitting, selection, data
    "fit steps negative": (lambda: pk.fit(pk.models.SKL(T, Y), num_steps=-3), ValueError,
                           "num_steps to be an integer >= 1"),
    "fit lr zero": (lambda: pk.fit(pk.models.SKL(T, Y), lr=0), ValueError,
                    "lr to be a finite number > 0"),
    "fit lr a string": (lambda: pk.fit(pk.models.SKL(T, Y), lr="0.01"), ValueError,
                        "lr to be a finite number > 0; got '0.01'"),
    "fit tol negative": (lambda: pk.fit(pk.models.SKL(T, Y), tol=-1), ValueError, "tol"),
    "fit restarts fractional": (lambda: pk.fit(pk.models.SKL(T, Y), restarts=1.5), ValueError,
                                "restarts to be an integer >= 0"),
    "fit a string for a model": (lambda: pk.fit("model"), TypeError,
                                 r"model\(\) and guide\(\) methods.*got str"),
    "one training point": (lambda: pk.models.SKL(T[:1], Y[:1]), ValueError,
                           "at least 2 training points for SKL; got 1"),
    "one training point for PI-DKL": (lambda: _ode(X=T[:1], y=Y[:1]), ValueError,
                                      "at least 2 training points for PIDKL"),
    "fit particles zero": (lambda: pk.fit(pk.models.SKL(T, Y), num_particles=0), ValueError,
                           "num_particles"),
    "cross_validate jobs zero": (lambda: pk.infer.cross_validate(
        lambda X, y, **c: pk.models.SKL(X, y), T, Y,
                                                           {"noise": [0.1]}, jobs=0),
                                 ValueError, "jobs to be an integer >= 1"),
    "kfold one fold": (lambda: pk.infer.kfold_splits(10, 1), ValueError, "k \\(folds\\)"),
    "restarts zero": (lambda: pk.infer.fit_restarts(lambda: pk.models.SKL(T, Y), 0), ValueError,
                      "restarts"),
    "ode data with NaN": (lambda: pk.datasets.simulate_first_order_ode(B=float("nan")),
                          ValueError, "B to be a finite number"),
    "ode data of one point": (lambda: pk.datasets.simulate_first_order_ode(n=1), ValueError,
                              "n \\(time points\\)"),
    "MLP depth negative": (lambda: pk.kernels.MLP(1, depth=-1), ValueError, "depth"),
    "reproduce seeds negative": (lambda: reproduce("ode", ["skl"], [-1], out="/tmp/x"),
                                 ValueError, "seeds to be integers >= 0"),
    "reproduce jobs zero": (lambda: reproduce("ode", ["skl"], [0], jobs=0, out="/tmp/x"),
                            ValueError, "jobs"),
    "reproduce unknown method": (lambda: reproduce("ode", ["lfm7"], out="/tmp/x"), ValueError,
                                 "Unknown method"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gets_a_one_line_error(case):
    make, error, match = BAD_INPUTS[case]
    pyro.clear_param_store()
    with pytest.raises(error, match=match) as info:
        make()
    assert "\n" not in str(info.value), str(info.value)


def test_a_garbage_mat_file_is_named_in_the_error(tmp_path):
    bad = tmp_path / "fold1.mat"
    bad.write_bytes(b"not a mat file at all" * 10)
    with pytest.raises(ValueError, match=f"{bad}.*cannot be read"):
        pk.datasets.load_mat_fold(bad)


CLI_ERRORS = [
    (["reproduce", "ode", "--seeds", "0-"], "expected seeds like"),
    (["reproduce", "ode", "--seeds", "a"], "expected seeds like"),
    (["reproduce", "ode", "--seeds", "4-0"], "expected seeds like"),
    (["reproduce", "ode", "--steps", "-3"], "expected an integer >= 1"),
    (["reproduce", "ode", "--jobs", "0"], "expected an integer >= 1"),
    (["reproduce", "ode", "--methods", "pidkl,nope"], "expected methods of 'ode'"),
    (["reproduce", "ode", "--data", "x.mat"], "for real-data experiments"),
    (["reproduce", "heat"], "invalid choice"),
    (["fit", "ode", "--gamma", "-1"], "expected a finite number >= 0"),
    (["fit", "ode", "--m", "0"], "expected an integer >= 1"),
    (["table", "missing.json"], "is not a file"),
]


@pytest.mark.parametrize("argv,message", CLI_ERRORS, ids=[" ".join(a) for a, _ in CLI_ERRORS])
def test_cli_argument_errors_are_one_line_before_any_work(argv, message, capsys, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("pidkl")
    assert not (tmp_path / "runs").exists()           # nothing started


def test_cli_table_of_a_corrupt_file(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text('[{"experiment": "ode", ')
    with pytest.raises(SystemExit):
        cli(["table", str(bad)])
    assert "cannot be read" in capsys.readouterr().err


def test_help_does_not_import_torch():
    code = ("import sys; from pyro_pidkl.paper import cli\n"
            "try:\n    cli.main(['reproduce', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stderr.strip().endswith("False") and "pidkl-best" in out.stdout


def test_the_catalogue_is_the_experiments():
    from pyro_pidkl.paper.catalogue import CATALOGUE
    from pyro_pidkl.paper.experiments import EXPERIMENTS

    assert CATALOGUE == {n: (tuple(e.methods), tuple(e.default_methods), e.data_env)
                         for n, e in EXPERIMENTS.items()}


def test_fit_divergence_message_is_one_paragraph():
    model = pk.PIDKL(T, Y, physics.first_order_ode(), m=3)

    def explode(step, loss):
        with torch.no_grad():
            model.noise_floor = 0.0
            for p in model.kernel.parameters():
                p.fill_(float("nan"))
    with pytest.raises(pk.FitDivergedError) as info:
        pk.fit(model, num_steps=5, progress=False, callback=explode)
    assert "Trace Shapes" not in str(info.value) and info.value.__cause__ is None


# -- interrupted and repeated runs -----------------------------------------------------------
def test_rerun_skips_recorded_fits_merges_and_force_redoes(tmp_path):
    first = reproduce("ode", ["skl"], [0, 1, 2], num_steps=2, out=tmp_path, progress=False,
                      figures=False)
    again = reproduce("ode", ["skl"], [0], num_steps=2, out=tmp_path, progress=False,
                      figures=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert sorted(r["seed"] for r in saved) == [0, 1, 2]        # seeds 1 and 2 kept
    assert again[0]["fit_seconds"] == first[0]["fit_seconds"]  # skipped: the same record
    redone = reproduce("ode", ["skl"], [0], num_steps=2, out=tmp_path, progress=False,
                       figures=False, force=True)
    assert redone[0]["fit_seconds"] != first[0]["fit_seconds"]
    assert len(json.loads((tmp_path / "results.json").read_text())) == 3
    other_steps = reproduce("ode", ["skl"], [0], num_steps=3, out=tmp_path, progress=False,
                            figures=False)
    assert other_steps[0]["hyper"]["steps"] == 3 and len(read_records(tmp_path)) == 4


def test_an_unreadable_folder_or_record_file_fails_before_any_fit(tmp_path):
    (tmp_path / "results.json").write_text("{ truncated")
    with pytest.raises(ValueError, match="results.json.*cannot be read"):
        reproduce("ode", ["skl"], [0], num_steps=2, out=tmp_path, progress=False)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(ValueError, match="writable output folder"):
            reproduce("ode", ["skl"], [0], num_steps=2, out=ro, progress=False)
    finally:
        ro.chmod(0o700)


@pytest.mark.slow
def test_a_run_killed_part_way_keeps_its_fits_and_a_rerun_finishes_each_once(tmp_path):
    """SIGKILL the main process (and its worker) after the first fits are recorded, rerun the
    same command: every (method, seed) is recorded exactly once, no orphan survives."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "pyro_pidkl", "reproduce", "ode", "--methods", "skl,dkl",
            "--seeds", "0-3", "--steps", "40", "--jobs", "2", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / "records.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed; make it longer"
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(2)
    alive = [c for c in children if subprocess.run(["kill", "-0", c]).returncode == 0]
    assert alive == [], f"workers outlived their parent: {alive}"
    kept = json.loads((out / "results.json").read_text())
    assert 2 <= len(kept) < 8
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=600)
    final = json.loads((out / "results.json").read_text())
    keys = sorted((r["method"], r["seed"]) for r in final)
    assert keys == sorted((m, s) for m in ("skl", "dkl") for s in range(4))
    for r in kept:   # the fits finished before the kill were not redone
        same = [f for f in final if (f["method"], f["seed"]) == (r["method"], r["seed"])]
        assert same[0]["fit_seconds"] == r["fit_seconds"]


# -- seeds ------------------------------------------------------------------------------------
def _predict_after_fit(route):
    pyro.clear_param_store()
    if route == "model":
        model = _ode(seed=3, m=4)
        pk.fit(model, num_steps=15, lr=0.02, seed=1, progress=False)
    elif route == "set_rng_seed":
        pyro.set_rng_seed(3)
        model = _ode(m=4)
        pk.fit(model, num_steps=15, lr=0.02, progress=False)
    return model(np.array([[0.5], [2.0]]))[0]


@pytest.mark.parametrize("route", ["model", "set_rng_seed"])
def test_the_same_seed_gives_the_same_fit_bit_for_bit(route):
    torch.manual_seed(100)           # a different global state before each run
    a = _predict_after_fit(route)
    torch.manual_seed(200)
    b = _predict_after_fit(route)
    assert torch.equal(a, b)


def test_fit_seed_repeats_a_fit_from_the_same_initial_model():
    model = _ode(m=4)
    twin = copy.deepcopy(model)
    pk.fit(model, num_steps=15, lr=0.02, seed=7, progress=False)
    torch.manual_seed(5)
    pk.fit(twin, num_steps=15, lr=0.02, seed=7, progress=False)
    X = np.array([[0.5], [2.0]])
    assert torch.equal(model(X)[0], twin(X)[0])
    assert not torch.equal(_ode(m=4, seed=1).kernel.iwarping_fn.layers[0].weight,
                           _ode(m=4, seed=2).kernel.iwarping_fn.layers[0].weight)


def test_input_names_come_from_a_table_in_column_order():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"t": XT[:, 1], "x": XT[:, 0]})
    model = pk.PIDKL(frame, YT, physics.heat_1d(), m=3)
    assert model.input_names == ("t", "x")


def _oscillator_eq():
    from torch.distributions import constraints
    return physics.Equation(lambda f, x, omega, zeta: (f.d("t", "t") + 2 * zeta * omega
                                                      * f.d("t") + omega ** 2 * f),
                            inputs=("t",), omega=physics.Parameter(1.0),
                            zeta=physics.Parameter(0.5, constraints.unit_interval))


@pytest.mark.slow
def test_repeated_rows_give_the_single_copy_fit_and_replicates_the_right_one():
    """The README's oscillator with every row given twice (or three times) is the same data:
    kept once, with a warning, the fit is the single copy's (before: omega 2.34, zeta 0.0025,
    the noise held at its floor). Replicates (each input measured again, another value) are
    more data: the coefficients stay within 10% of the truth (2, 0.15), inside their 95%
    intervals."""
    import warnings
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    X, y = torch.as_tensor(data.X_train), torch.as_tensor(data.y_train)
    fits = {}
    for copies in (1, 2, 3):
        model = pk.PhysicsConditionedGP(X.repeat(copies, 1), y.repeat(copies), _oscillator_eq(),
                                        domain=pk.Box(t=(0.0, 6.0)))
        assert model.X.shape[0] == X.shape[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pk.fit(model, progress=False)
        fits[copies] = model.equation_parameters()
    for copies in (2, 3):
        assert fits[copies] == fits[1]
    with pytest.warns(UserWarning, match="repeat an earlier row exactly"):
        pk.PhysicsConditionedGP(X.repeat(2, 1), y.repeat(2), _oscillator_eq())
    g = torch.Generator().manual_seed(1)
    again = y + 0.05 * torch.randn(y.shape, generator=g, dtype=y.dtype)   # a second reading
    model = pk.PhysicsConditionedGP(torch.cat([X, X]), torch.cat([y, again]), _oscillator_eq(),
                                    domain=pk.Box(t=(0.0, 6.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk.fit(model, progress=False)
    est = model.equation_parameters()
    assert abs(est["omega"] - 2.0) < 0.1 and abs(est["zeta"] - 0.15) < 0.015, est
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iv = model.coefficient_intervals(0.95)
    assert all(iv[k]["lower"] <= v <= iv[k]["upper"] for k, v in (("omega", 2.0),
                                                                   ("zeta", 0.15))), iv


def test_all_data_at_one_input_warn():
    """Twenty readings at one time cannot tell the coefficients: said in one line."""
    X = torch.full((20, 1), 0.5, dtype=torch.float64)
    y = 1.0 + 0.01 * torch.randn(20, generator=torch.Generator().manual_seed(0),
                                 dtype=torch.float64)
    with pytest.warns(UserWarning, match="at one input"):
        pk.PhysicsConditionedGP(X, y, _oscillator_eq(), domain=pk.Box(t=(0.0, 6.0)))


def test_zero_steps_are_refused():
    with pytest.raises(ValueError, match="num_steps"):
        pk.fit(_ode(), num_steps=0)


def test_an_interrupted_conditioned_fit_says_so_when_it_predicts():
    """Ctrl-C inside L-BFGS (a KeyboardInterrupt from the objective after a few
    evaluations): the model is not marked fitted, and its next prediction warns that the
    fit did not finish; a finished fit clears it."""
    import warnings
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    model = pk.PhysicsConditionedGP(data.X_train, data.y_train, _oscillator_eq(),
                                    domain=pk.Box(t=(0.0, 6.0)))
    original, calls = model._objective, [0]

    def interrupted(joint):
        calls[0] += 1
        if calls[0] > 5:
            raise KeyboardInterrupt
        return original(joint)
    model._objective = interrupted
    with pytest.raises(KeyboardInterrupt):
        pk.fit(model, progress=False)
    assert not bool(model.fitted) and model.fit_interrupted
    with pytest.warns(UserWarning, match="did not finish"):
        model(data.X_test[:3])
    model._objective = original
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk.fit(model, progress=False)
    assert bool(model.fitted) and not model.fit_interrupted
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(data.X_test[:3])


def test_a_coefficient_the_residual_never_reads_and_too_few_equations_warn():
    """A coefficient that never enters the residual stays at its start whatever the fit
    does, and a system with fewer equations than outputs does not determine them: each is
    said in one line, naming it."""
    t = torch.linspace(0, 1, 12, dtype=torch.float64)
    eq = physics.Equation(lambda f, x, a, b: f.d("t") + a * f, inputs=("t",), a=1.0, b=1.0)
    with pytest.warns(UserWarning, match="b never enters the residual"):
        pk.PhysicsConditionedGP(t[:, None], torch.exp(-t), eq)

    def one(f, x, k):
        return (f["u"].d("t") + k * f["u"],)
    system = pk.EquationSystem(one, outputs=("u", "v"), inputs=("t",), k=1.0)
    with pytest.warns(UserWarning, match="1 equation\\(s\\) for 2 outputs"):
        pk.ConditionedSystemGP(system, {"u": (t, torch.exp(-t))})

    def unused(f, x, k, c):
        return (f["u"].d("t") + k * f["u"], f["v"].d("t") - f["u"])
    system = pk.EquationSystem(unused, outputs=("u", "v"), inputs=("t",), k=1.0, c=1.0)
    with pytest.warns(UserWarning, match="c never enters the residuals"):
        pk.ConditionedSystemGP(system, {"u": (t, torch.exp(-t))})


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_linearisation_that_overflows_mid_fit_is_undone_not_raised():
    """Gauss-Newton after an L-BFGS run meets a non-finite joint (as an epidemic's exp(u)
    at a trial rate does): the fit goes back to the best linearised state it had and ends,
    with finite coefficients, instead of raising."""
    from pyro_pidkl.errors import NonFiniteError
    t = torch.linspace(0, 2, 20, dtype=torch.float64)
    system = pk.EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"] ** 2,),
                               outputs=("u",), inputs=("t",), k=1.0)
    model = pk.ConditionedSystemGP(system, {"u": (t, 1 / (1 + 0.7 * t))}, collocation=30)
    assert not model.linear
    real, calls = model.relinearise, [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:                       # the second run's relinearisation overflows
            raise NonFiniteError("a joint with inf")
        return real(*args, **kwargs)
    model.relinearise = flaky
    pk.fit(model, progress=False)
    assert calls[0] >= 3
    k = model.equation_parameters()["k"]
    assert math.isfinite(k) and abs(k - 0.7) < 0.1
