"""Figures like the paper's: 1-D predictive bands, 2-D error and sd maps (headless PNG)."""

import textwrap

import numpy as np

__all__ = ["bands_1d", "calibration", "comparison", "experiment_figure", "maps_2d"]


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
    fig.savefig(path, dpi=80)
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
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def experiment_figure(experiment, data, predictions, path, seed=0, note=""):
    """The figure of an experiment: bands for one input, maps for two; ``note`` ends the
    title (e.g. a mark that the fits ran other than the protocol's steps)."""
    title = f"{experiment.description} (seed {seed}){note}"
    if data.X_test.shape[1] == 1:
        return bands_1d(data, predictions, path, title)
    if data.X_test.shape[1] == 2:
        return maps_2d(data, predictions, path, title)
    return None


def calibration(scores, pits, path, title=""):
    """Nominal vs empirical central-interval coverage per method, and PIT histograms.

    :param scores: ``{method: predictive_scores(...)}``.
    :param pits: ``{method: PIT values}``.
    """
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    for i, (method, s) in enumerate(scores.items()):
        levels = sorted(s["coverage"])
        ax.plot(levels, [s["coverage"][lv] for lv in levels], "o-", color=f"C{i}",
                label=method.upper())
        bx.hist(pits[method], bins=20, range=(0, 1), density=True, histtype="step",
                color=f"C{i}", lw=1.5, label=f"{method.upper()} (KS p={s['pit_ks_pvalue']:.2g})")
    bx.axhline(1.0, color="k", ls="--", lw=1)
    ax.set_xlabel("nominal coverage of the central interval")
    ax.set_ylabel("empirical coverage (test)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    bx.set_xlabel("PIT value")
    bx.set_ylabel("density")
    bx.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def comparison(summary_rows, path, title=""):
    """Bars of median nRMSE (RMSE / sd of the test targets) and median test log predictive
    density per method (spread as error bars, min to max over seeds or splits), as the
    paper's Fig. 4/5. Rows without nRMSE (records older than it) are left out."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    summary_rows = [r for r in summary_rows if "nrmse" in r]
    names = [r.get("label", r["method"]).upper() for r in summary_rows]
    for ax, key, label in zip(axes, ("nrmse", "test_lpd"),
                                ("test nRMSE (RMSE / sd)", "mean test log predictive density")):
        med = np.array([r[key][0] for r in summary_rows])
        lo = med - np.array([r[key][1] for r in summary_rows])
        hi = np.array([r[key][2] for r in summary_rows]) - med
        ax.bar(names, med, yerr=[lo, hi], color=[f"C{i}" for i in range(len(names))],
               capsize=4)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
