"""Real-data loaders (Jura via gstat's jura.rda, PM2.5 folds) and the Burgers solver."""

import numpy as np
import pytest
from scipy.io import savemat

from pyro_pidkl import datasets
from pyro_pidkl.datasets import simulate_burgers, cole_hopf, find_jura, jura, pm25, solve_burgers


@pytest.fixture
def jura_file():
    try:
        return find_jura()
    except FileNotFoundError:
        pytest.skip("gstat's jura.rda not found (apt-get install r-cran-gstat, or set "
                    "PIDKL_JURA)")


def test_jura_tasks_have_the_papers_inputs_and_split(jura_file):
    data = datasets.load_jura(jura_file)
    assert all(v.shape == (359,) for v in data.values())
    cd = jura("Cd", seed=0)
    assert cd.input_names == ("x", "y", "Ni", "Zn")
    assert (cd.X_train.shape, cd.X_test.shape) == ((50, 4), (309, 4))
    cu = jura("Cu", seed=0)
    assert cu.input_names == ("x", "y", "Pb", "Ni", "Zn")
    # the target is the column it says, row by row
    rows = [np.flatnonzero((data["Xloc"] == x) & (data["Yloc"] == y))[0]
            for x, y in cu.X_train[:, :2]]
    np.testing.assert_array_equal(cu.y_train, data["Cu"][rows])
    np.testing.assert_array_equal(cu.X_train[:, 2], data["Pb"][rows])
    # seeds give different splits; the same seed the same one
    assert not np.array_equal(jura("Cd", seed=1).y_train, cd.y_train)
    np.testing.assert_array_equal(jura("Cd", seed=0).X_train, cd.X_train)


def test_reference_jura_cd_fold_is_in_fact_zinc(jura_file, reference):
    fold = datasets.load_mat_fold(reference / "jura_cd" / "fold1.mat")
    data = datasets.load_jura(jura_file)
    X = np.concatenate([fold.X_train, fold.X_test])
    y = np.concatenate([fold.y_train, fold.y_test])
    match = [np.flatnonzero((np.abs(data["Xloc"] - a) < 1e-9) & (np.abs(data["Yloc"] - b) < 1e-9))
             for a, b in X[:, :2]]
    found = np.array([m.size == 1 for m in match])
    assert found.mean() > 0.99
    rows = np.array([m[0] for m in match if m.size == 1])
    np.testing.assert_allclose(y[found], data["Zn"][rows], atol=1e-9)      # target: Zn
    assert np.abs(y[found] - data["Cd"][rows]).max() > 10                   # not Cd
    assert np.median(np.abs(X[found, 2] - data["Cd"][rows])) < 1e-9       # Cd is an input


def test_jura_missing_file_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PIDKL_JURA", str(tmp_path / "nowhere.rda"))
    with pytest.raises(FileNotFoundError, match="r-cran-gstat"):
        jura("Cd")
    with pytest.raises(ValueError, match="Unknown Jura target 'Pb'"):
        datasets.jura("Pb", path=tmp_path)


def test_pm25_loader_and_splits(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    Xtr, Xte = rng.uniform(size=(50, 3)), rng.uniform(size=(200, 3))
    savemat(tmp_path / "fold1.mat", {"X_train": Xtr, "Y_train": Xtr[:, :1],
                                     "X_test": Xte, "Y_test": Xte[:, :1]})
    fold = datasets.load_pm25_fold(tmp_path)
    assert fold.input_names == ("lon", "lat", "t")
    monkeypatch.setenv("PIDKL_PM25", str(tmp_path))
    a, b = pm25(seed=0), pm25(seed=1)
    assert (a.X_train.shape, a.X_test.shape) == ((50, 3), (200, 3))
    np.testing.assert_array_equal(a.y_train, a.X_train[:, 0])
    assert not np.array_equal(a.y_train, b.y_train)
    pooled = np.sort(np.concatenate([a.y_train, a.y_test]))
    np.testing.assert_array_equal(pooled, np.sort(np.concatenate([Xtr[:, 0], Xte[:, 0]])))
    with pytest.raises(FileNotFoundError, match="PIDKL_PM25"):
        datasets.load_pm25_fold(tmp_path, fold=7)


def test_pm25_reference_fold(reference):
    d = datasets.load_pm25_fold(reference / "pm25")
    assert (d.X_train.shape, d.X_test.shape) == ((500, 3), (2000, 3))


@pytest.mark.parametrize("nu, c", [(0.1, 2.0), (0.05, 1.2)])
def test_burgers_solver_matches_cole_hopf(nu, c):
    x, t, F = solve_burgers(lambda x: cole_hopf(x, 0.0, nu, c), np.linspace(0, 2, 9), nu,
                            nx=256)
    exact = cole_hopf(x[:, None], t[None, :], nu, c)
    assert np.abs(F - exact).max() < 1e-8
    assert np.abs(exact).max() > 0.1 * (2 * nu / (c - 1))  # a non-trivial profile


def test_burgers_source_enters_with_the_right_sign():
    # f = sin(x) held still by g = f f_x - nu f_xx  (so f_t = 0)
    nu = 0.1
    g = lambda x, t: np.sin(x) * np.cos(x) + nu * np.sin(x)  # noqa: E731
    x, t, F = solve_burgers(np.sin, [0.0, 1.0], nu, source=g, nx=64)
    assert np.abs(F[:, -1] - np.sin(x)).max() < 1e-8


def test_burgers_task_extrapolates_in_time():
    d = simulate_burgers(seed=0)
    assert d.X_train[:, 1].max() <= 1.0 and d.X_test[:, 1].min() > 1.0
    assert d.X_train.shape == (300, 2) and d.truth == {"nu": 0.05}
    with pytest.raises(ValueError, match="viscosity"):
        solve_burgers(np.sin, [0, 1], nu=0.0)


def test_heat_2d_solution_satisfies_the_equation():
    from pyro_pidkl.datasets import simulate_heat_2d, solve_heat_2d

    rng = np.random.default_rng(0)
    P = rng.uniform(0, 2, (20, 3))
    h = 1e-4
    f = lambda dx, dy, dt: solve_heat_2d(P + np.array([dx, dy, dt]), alpha=0.3)  # noqa: E731
    ft = (f(0, 0, h) - f(0, 0, -h)) / (2 * h)
    lap = (f(h, 0, 0) + f(-h, 0, 0) + f(0, h, 0) + f(0, -h, 0) - 4 * f(0, 0, 0)) / h ** 2
    assert np.abs(ft - 0.3 * lap).max() < 1e-5
    # periodic in x and y
    np.testing.assert_allclose(f(2 * np.pi, 0, 0), f(0, 0, 0), atol=1e-12)
    d = simulate_heat_2d(n_train=100, n_test=50)
    assert d.X_train.shape == (100, 3) and d.X_test.shape == (50, 3)


def test_the_papers_fold_files_load_with_named_columns(tmp_path, monkeypatch):
    """f1.mat .. f5.mat as the paper's code names them (fold1.mat too), columns named."""
    rng = np.random.default_rng(0)
    for k in (1, 2):
        savemat(tmp_path / f"f{k}.mat", {"X_train": rng.normal(size=(50, 4)) + k,
                                         "Y_train": rng.normal(size=(50, 1)),
                                         "X_test": rng.normal(size=(20, 4)),
                                         "Y_test": rng.normal(size=(20, 1))})
    d0, d1 = jura("Cd", seed=0, path=tmp_path), jura("Cd", seed=1, path=tmp_path)
    assert d0.input_names == ("x", "y", "Cd", "Ni") and "Zn" in d0.name   # the paper's mislabel
    assert not np.array_equal(d0.X_train, d1.X_train)                      # seed k: fold k + 1
    with pytest.raises(ValueError, match=r"Expected 5 columns"):
        jura("Cu", seed=0, path=tmp_path)
    with pytest.raises(FileNotFoundError, match="f3.mat or fold3.mat"):
        datasets.load_paper_fold(tmp_path, "jura-cd", fold=3)
    pm = tmp_path / "pm"
    pm.mkdir()
    savemat(pm / "f2.mat", {"X_train": rng.normal(size=(30, 3)), "Y_train": rng.normal(size=(30, 1)),
                            "X_test": rng.normal(size=(10, 3)), "Y_test": rng.normal(size=(10, 1))})
    assert datasets.find_pm25(pm, fold=2).name == "f2.mat"
    assert datasets.load_paper_fold(pm, "pm25", fold=2).input_names == ("lon", "lat", "t")
