"""Figures like the paper's: 1-D predictive bands, 2-D error and sd maps (headless PNG)."""

import numpy as np

__all__ = ["bands_1d", "experiment_figure", "maps_2d"]


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def bands_1d(data, predictions, path, title=""):
    """Posterior mean +/- 1 sd of ``f`` per method against the truth; training region shaded.

    :param predictions: ``{method: {"mean": (M,), "var_f": (M,)}}`` at ``data.X_test``.
    """
    plt = _pyplot()
    n = len(predictions)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), sharey=True, squeeze=False)
    t_all = np.r_[data.X_train[:, 0], data.X_test[:, 0]]
    y_all = np.r_[data.y_train, data.y_test]
    order = np.argsort(t_all)
    test_order = np.argsort(data.X_test[:, 0])
    t = data.X_test[test_order, 0]
    for ax, (method, p) in zip(axes[0], predictions.items()):
        mean, sd = p["mean"][test_order], np.sqrt(p["var_f"][test_order])
        ax.axvspan(data.X_train[:, 0].min(), data.X_train[:, 0].max(), color="0.9",
                   label="training region")
        ax.plot(t_all[order], y_all[order], "k-", lw=1.2, label="truth")
        ax.plot(t, mean, "C0-", lw=1.2, label="posterior mean")
        ax.fill_between(t, mean - sd, mean + sd, color="C0", alpha=0.3, label="+/- 1 sd")
        ax.plot(data.X_train[:, 0], data.y_train, "k.", ms=2)
        ax.set_title(method.upper())
        ax.set_xlabel(data.input_names[0])
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _grid(X, values):
    xs, ts = np.unique(X[:, 0]), np.unique(X[:, 1])
    grid = np.full((len(ts), len(xs)), np.nan)
    grid[np.searchsorted(ts, X[:, 1]), np.searchsorted(xs, X[:, 0])] = values
    return xs, ts, grid


def maps_2d(data, predictions, path, title=""):
    """|mean - truth| and predictive sd of ``f`` over the two inputs, per method; the
    training points are drawn on every panel."""
    plt = _pyplot()
    n = len(predictions)
    fig, axes = plt.subplots(2, n, figsize=(3.6 * n, 6.0), squeeze=False)
    errs = {m: np.abs(p["mean"] - data.y_test) for m, p in predictions.items()}
    sds = {m: np.sqrt(p["var_f"]) for m, p in predictions.items()}
    vmax_e = max(float(np.nanmax(e)) for e in errs.values())
    vmax_s = max(float(np.nanmax(s)) for s in sds.values())
    for j, method in enumerate(predictions):
        for i, (values, label, vmax) in enumerate(((errs[method], "|mean - truth|", vmax_e),
                                                    (sds[method], "predictive sd", vmax_s))):
            ax = axes[i, j]
            xs, ts, grid = _grid(data.X_test, values)
            im = ax.imshow(grid, origin="lower", aspect="auto", vmin=0, vmax=vmax,
                           extent=(xs[0], xs[-1], ts[0], ts[-1]), cmap="viridis")
            ax.plot(data.X_train[:, 0], data.X_train[:, 1], "r.", ms=2)
            ax.set_title(f"{method.upper()}: {label}", fontsize=9)
            ax.set_xlabel(data.input_names[0])
            ax.set_ylabel(data.input_names[1])
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title + " (red: training points)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def experiment_figure(experiment, data, predictions, path, seed=0):
    """The figure of an experiment: bands for one input, maps for two."""
    title = f"{experiment.description} (seed {seed})"
    if data.X_test.shape[1] == 1:
        return bands_1d(data, predictions, path, title)
    if data.X_test.shape[1] == 2:
        return maps_2d(data, predictions, path, title)
    return None
