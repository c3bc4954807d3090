"""Execute the notebooks top to bottom with a small number of steps."""

import os
import re
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook extra not installed")
nbclient = pytest.importorskip("nbclient", reason="notebook extra not installed")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_ten_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["01_quickstart", "02_write_your_own_equation",
                                           "03_diffusion", "04_model_code",
                                           "05_full_vi_vs_collapsed",
                                           "06_system_with_an_unobserved_component",
                                           "07_collapsed_vs_full_vi_vs_nuts",
                                           "08_lynx_hare", "09_editing_the_model",
                                           "10_populations"]


#: the test's optimiser steps for a notebook that reads ``PIDKL_NOTEBOOK_STEPS``
TEST_STEPS = 20
#: how far a fresh run's printed number may lie from the committed one's: thread counts
#: and the processor move a fit's last digits, a stale output moves more
RTOL = 5e-3


def _own_steps(nb):
    """The optimiser steps a notebook runs at by default, or None where it reads none."""
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    found = re.search(r"PIDKL_NOTEBOOK_STEPS['\"], ['\"](\d+)['\"]", source)
    return int(found.group(1)) if found else None


NUMBER = r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?"


def printed_lines(nb):
    """The lines a notebook prints (its stdout), timings left out (CPU seconds vary)."""
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", [])
                     if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return [re.sub(NUMBER + r"\s*(?:CPU s|seconds|s\b)", "", line)
            for line in text.splitlines()]


def printed_numbers(nb):
    """Every number a notebook prints, timings left out."""
    return [float(v) for line in printed_lines(nb) for v in re.findall(NUMBER, line)]


def _moved(committed, fresh):
    """The printed lines whose words or numbers a fresh run changed: ``(old, new)``."""
    def same(a, b):          # the same words, every number within RTOL
        return (re.sub(NUMBER, "#", a) == re.sub(NUMBER, "#", b)
                and all(np.isclose(float(x), float(y), rtol=RTOL, atol=1e-9)
                        for x, y in zip(re.findall(NUMBER, a), re.findall(NUMBER, b))))
    out = [(a, b) for a, b in zip(committed, fresh) if not same(a, b)]
    if len(committed) != len(fresh):
        out.append((f"{len(committed)} lines", f"{len(fresh)} lines"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    """Each notebook runs top to bottom without an error or a warning; one that runs at its
    own settings in the test (no optimiser steps, or as few as the test's) prints the
    numbers its committed copy shows, so a stale output cannot ship."""
    nb = nbformat.read(path, as_version=4)
    own = _own_steps(nb)
    as_committed = (own is None or own <= TEST_STEPS) and \
        "PIDKL_NOTEBOOK_STEPS" not in os.environ
    steps = str(own) if own is not None and as_committed else str(TEST_STEPS)
    monkeypatch.setenv("PIDKL_NOTEBOOK_STEPS", os.environ.get("PIDKL_NOTEBOOK_STEPS", steps))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    committed = printed_lines(nb)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert not _warnings(nb)
    if as_committed:
        moved = _moved(committed, printed_lines(nb))
        assert moved == [], f"committed -> fresh: {moved[:6]} (rerun the notebook)"


def test_printed_numbers_leave_out_timings():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("stream", name="stdout",
                               text="k 3.70 [3.53, 3.89] (70.9 CPU s, 2 s)\n1e-3\n")])])
    assert printed_numbers(nb) == [3.70, 3.53, 3.89, 1e-3]
    assert _moved(printed_lines(nb), printed_lines(nb)) == []
    stale = [line.replace("3.70", "3.93") for line in printed_lines(nb)]
    assert len(_moved(printed_lines(nb), stale)) == 1


def _warnings(nb):
    """Warnings a reader would see: stderr lines naming a warning class, but for those the
    cell's source announces (a comment ``# warns: ClassName``: the warning is the point)."""
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        announced = re.findall(r"# warns: (\w+)", c.source)
        out += [line for o in c.get("outputs", [])
                if o.get("output_type") == "stream" and o.get("name") == "stderr"
                for line in o.get("text", "").splitlines() if "Warning:" in line
                and not any(f"{name}:" in line for name in announced)]
    return out


def test_an_announced_warning_is_shown_and_another_is_caught():
    def cell(source, text):
        return nbformat.v4.new_code_cell(source, outputs=[nbformat.v4.new_output(
            "stream", name="stderr", text=text)])
    said = "x.py:1: ModelMisfitWarning: the data disagree\n"
    nb = nbformat.v4.new_notebook(cells=[cell("pk.fit(m)  # warns: ModelMisfitWarning", said)])
    assert _warnings(nb) == []
    nb = nbformat.v4.new_notebook(cells=[cell("pk.fit(m)", said)])
    assert len(_warnings(nb)) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_show_no_warnings(path):
    """The executed notebooks in the repository show no warning (a tqdm warning with the
    build machine's path once opened each of them)."""
    assert _warnings(nbformat.read(path, as_version=4)) == []
