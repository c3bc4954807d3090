import numpy as np
import pytest
from scipy.linalg import expm

from pyro_pidkl import datasets


def test_ode_solver_matches_closed_form():
    t = np.linspace(0, 2, 50)
    B, D, f0 = 1.3, 0.4, 0.9
    f = datasets.solve_first_order_ode(t, B, D, f0, source=lambda s: 0.0 * s)
    exact = D / B + (f0 - D / B) * np.exp(-B * t)
    np.testing.assert_allclose(f, exact, atol=1e-10)


def test_diffusion_solver_matches_matrix_exponential():
    """Method of lines: U(t) = u_ss + expm(A t)(u0 - u_ss) for the same discretisation."""
    alpha, nx = 0.1, 50
    x, t, U = datasets.solve_diffusion_1d(alpha, nx)
    dx = 2.0 / (nx - 1)
    n = nx - 2
    A = (np.diag(-2 * np.ones(n)) + np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1))
    A *= alpha / dx ** 2
    u0 = np.where((x >= 0.755) & (x <= 1.245), 2.0, 1.0)
    for k in (0, 40, 100):
        exact = 1.0 + expm(A * t[k]) @ (u0 - 1.0)
        np.testing.assert_allclose(U[:, k], exact, atol=1e-7)
    assert U.shape == (48, 101) and np.allclose(t[[0, -1]], [0.01, 1.01])


def test_generated_tasks_have_the_paper_shapes():
    ode = datasets.simulate_first_order_ode()
    assert ode.X_train.shape == (100, 1) and ode.X_test.shape == (901, 1)
    assert ode.X_train.max() < 0.1 <= ode.X_test.min()
    assert ode.y_train[0] == pytest.approx(0.1)
    dif = datasets.simulate_diffusion_1d()
    assert dif.X_train.shape == (48, 2) and dif.X_test.shape == (4800, 2)
    assert np.allclose(dif.X_train[:, 1], 0.5) and not np.isclose(dif.X_test[:, 1], 0.5).any()


def test_ode_generator_reproduces_the_reference(reference):
    ref = datasets.load_reference_ode(reference / "ode_extrap.mat")
    ours = datasets.simulate_first_order_ode()
    np.testing.assert_allclose(ours.X_train, ref.X_train, atol=1e-12)
    np.testing.assert_allclose(ours.X_test, ref.X_test, atol=1e-12)
    rmse = np.sqrt(np.mean((np.r_[ours.y_train, ours.y_test] - np.r_[ref.y_train, ref.y_test]) ** 2))
    assert rmse < 1e-4


def test_diffusion_generator_reproduces_the_reference(reference):
    ref = datasets.load_reference_diffusion(reference / "diffusion_1d.mat")
    x, t, U = datasets.solve_diffusion_1d(0.1)
    # the reference grid X is (x, t) with x fastest; Y holds the field there
    Uref = ref.y_test.reshape(101, 48).T
    np.testing.assert_allclose(ref.X_test[:48, 0], x)
    rmse = np.sqrt(np.mean((U - Uref) ** 2))
    assert rmse < 0.01
    # the shipped training slice is labelled t = 0.5 but holds the t = 0.51 values
    assert np.allclose(ref.X_train[:, 1], 0.5)
    np.testing.assert_allclose(ref.y_train, Uref[:, 50], atol=1e-12)
    assert np.abs(ref.y_train - Uref[:, 49]).max() > 1e-4


def test_mat_fold_loader(reference, tmp_path):
    fold = datasets.load_mat_fold(reference / "pm25" / "fold1.mat", ("lon", "lat", "t"))
    assert fold.X_train.shape == (500, 3) and fold.y_test.shape == (2000,)
    assert fold.input_names == ("lon", "lat", "t")
    with pytest.raises(FileNotFoundError, match="No such data file"):
        datasets.load_mat_fold(tmp_path / "missing.mat")
    from scipy.io import savemat
    savemat(tmp_path / "bad.mat", {"X_train": np.zeros((2, 1))})
    with pytest.raises(KeyError, match="lacks"):
        datasets.load_mat_fold(tmp_path / "bad.mat")
