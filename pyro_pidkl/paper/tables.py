"""The reproduction's records as tables: each method's median [min, max] over seeds of every
score, the calibration at each level, and the learned coefficients (:func:`summarize`), as
the text table ``pidkl reproduce`` prints and the Markdown of ``docs/paper.md``."""

import math

import numpy as np

from ..diagnostics.calibration import LEVELS
from .experiments import EXPERIMENTS

__all__ = ["LEVEL_KEYS", "calibration_markdown", "format_table", "markdown_table", "summarize"]


#: the coverage levels as the keys of a record read back from JSON
LEVEL_KEYS = tuple(str(level) for level in LEVELS)


def summarize(records):
    """Per (experiment, method): median and (min, max) over seeds of the scores, and the
    median coverage at each level, PIT KS p-value and PSIS-LOO elpd where recorded."""
    out = {}
    for r in records:
        steps = r.get("hyper", {}).get("steps")
        out.setdefault((r["experiment"], r["method"], steps), []).append(r)
    rows = []
    for (exp, method, steps), rs in out.items():
        protocol = EXPERIMENTS[exp].protocol.num_steps if exp in EXPERIMENTS else steps
        label = method if steps in (None, protocol) else f"{method} [{steps} steps*]"
        row = {"experiment": exp, "method": method, "label": label, "seeds": len(rs),
               "steps": steps,
               "protocol_steps": steps in (None, protocol)}
        for key in ("rmse", "nrmse", "relative_l2", "test_lpd", "coverage95", "fit_seconds",
                    "crps"):
            if not all(key in r for r in rs):
                continue  # e.g. records made before CRPS or RMSE / sd were scored
            v = np.array([r[key] for r in rs], dtype=float)
            row[key] = (float(np.median(v)), float(v.min()), float(v.max()))
        if all("coverage" in r for r in rs):
            row["coverage"] = {lv: float(np.median([r["coverage"][lv] for r in rs]))
                               for lv in LEVEL_KEYS}
            row["pit_ks_pvalue"] = float(np.median([r["pit_ks_pvalue"] for r in rs]))
            elpd = [r["loo_elpd"] for r in rs if r.get("loo_elpd") is not None]
            row["loo_elpd"] = float(np.median(elpd)) if elpd else float("nan")
        if method.startswith("pidkl"):
            row["gamma"] = sorted({r["hyper"].get("gamma") for r in rs})
            row["m"] = sorted({r["hyper"].get("m") for r in rs})
            row["selected"] = ("CV" if any(r["hyper"].get("cv") for r in rs) else "fixed")
            if any(r["hyper"].get("skip_inputs") for r in rs):
                row["selected"] += ", [phi(u), u] kernel"
            restarts = {r["hyper"].get("restarts") for r in rs} - {None}
            if restarts:
                how = "mixture" if method == "pidkl-ens" else "best training objective"
                row["selected"] += f", {max(restarts)} restarts: {how}"
        if any("learned" in r["hyper"] for r in rs):
            learned = {}
            for r in rs:
                for k, v in r["hyper"].get("learned", {}).items():
                    learned.setdefault(k, []).append(v)
            row["learned"] = {k: float(np.median(v)) for k, v in learned.items()}
        if all("posterior" in r["hyper"] for r in rs):
            row["posterior"] = {}
            for k in rs[0]["hyper"]["posterior"]:
                post = [r["hyper"]["posterior"][k] for r in rs]
                truth = [r["hyper"].get("truth", {}).get(k) for r in rs]
                covered = [t is not None and q["lower"] <= t <= q["upper"]
                           for q, t in zip(post, truth)]
                row["posterior"][k] = {
                    "mean": float(np.median([q["mean"] for q in post])),
                    "lower": float(np.median([q["lower"] for q in post])),
                    "upper": float(np.median([q["upper"] for q in post])),
                    "covered": f"{sum(covered)}/{len(covered)}"}
        rows.append(row)
    return rows


def _cell(row, key, fmt):
    """``median [min, max]`` of a summarised score (``—`` when not recorded)."""
    if key not in row:
        return "—"
    med, lo, hi = row[key]
    return f"{med:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def format_table(records):
    """A plain-text table: median [min, max] over seeds."""
    lines = [f"{'experiment':<10} {'method':<12} {'n':>2}  {'RMSE':>22}  {'nRMSE':>22}  "
             f"{'test LPD':>24}  {'cov95':>19}  {'fit s':>6}"]
    rows = summarize(records)
    for row in rows:
        lines.append(f"{row['experiment']:<10} {row['label']:<12} {row['seeds']:>2}  "
                     f"{_cell(row, 'rmse', '.4f'):>22}  {_cell(row, 'nrmse', '.4f'):>22}  "
                     f"{_cell(row, 'test_lpd', '.2f'):>24}  "
                     f"{_cell(row, 'coverage95', '.2f'):>19}  "
                     f"{row['fit_seconds'][0]:6.1f}")
        notes = []
        if "gamma" in row:
            chosen = "chosen " if row.get("selected") == "CV" else ""
            notes.append(f"gamma {chosen}{row['gamma']}, m {row['m']} ({row['selected']})")
        if row.get("learned"):
            notes.append("learned (median) " + ", ".join(f"{k}={v:.4g}"
                                                         for k, v in row["learned"].items()))
        for k, q in row.get("posterior", {}).items():
            notes.append(f"posterior {k}: mean {q['mean']:.4g}, 90% [{q['lower']:.4g}, "
                         f"{q['upper']:.4g}] (medians); covers truth in {q['covered']} seeds")
        if notes:
            lines.append(f"{'':<10} {'':<12}     " + "; ".join(notes))
    return "\n".join(lines + _steps_footnote(rows))


def _steps_footnote(rows):
    """The line that says which of the summarised ``rows`` did not run the protocol's
    number of steps."""
    if all(row["protocol_steps"] for row in rows):
        return []
    return ["", "* trained with other than the protocol's number of steps: not a protocol "
                "result"]


def calibration_markdown(records):
    """Median empirical coverage of the central 50/80/90/95% intervals, PIT uniformity and
    PSIS-LOO on the training data, per method."""
    lines = ["| experiment | method | cov 50% | cov 80% | cov 90% | cov 95% | "
             "PIT KS p (median) | PSIS-LOO elpd (train) |", "|" + "---|" * 8]
    for row in summarize(records):
        if "coverage" not in row:
            continue
        cov = row["coverage"]
        # PSIS-LOO needs the exact GP posterior: "—" for the sparse model
        elpd = "—" if math.isnan(row["loo_elpd"]) else f"{row['loo_elpd']:.1f}"
        lines.append(f"| {row['experiment']} | {row['label']} | {cov['0.5']:.2f} | "
                     f"{cov['0.8']:.2f} | {cov['0.9']:.2f} | {cov['0.95']:.2f} | "
                     f"{row['pit_ks_pvalue']:.2g} | {elpd} |")
    return "\n".join(lines)


def markdown_table(records):
    """The README's results table (median [min, max] over seeds)."""
    lines = ["| experiment | method | seeds | RMSE | nRMSE (RMSE / sd) | test LPD | CRPS | "
             "95% coverage | fit s | gamma (how set) | learned (median) |", "|" + "---|" * 11]
    rows = summarize(records)
    for row in rows:
        learned = ", ".join(f"{k} {v:.3g}" for k, v in row.get("learned", {}).items())
        gamma = ", ".join(f"{g:g}" for g in row.get("gamma", []))
        if row.get("m", [10]) != [10]:  # say m when the CV chose other than 10
            gamma += "; m " + ", ".join(str(m) for m in row["m"])
        if row.get("selected"):
            gamma += f" ({row['selected']})"
        lines.append(f"| {row['experiment']} | {row['label']} | {row['seeds']} | "
                     f"{_cell(row, 'rmse', '.4f')} | {_cell(row, 'nrmse', '.3f')} | "
                     f"{_cell(row, 'test_lpd', '.2f')} | "
                     f"{_cell(row, 'crps', '.4f')} | "
                     f"{_cell(row, 'coverage95', '.2f')} | "
                     f"{row['fit_seconds'][0]:.1f} | {gamma} | {learned} |")
    return "\n".join(lines + _steps_footnote(rows))
