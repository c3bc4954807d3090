"""Execute the notebooks top to bottom with a small number of steps."""

import os
from pathlib import Path

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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PIDKL_NOTEBOOK_STEPS", os.environ.get("PIDKL_NOTEBOOK_STEPS", "20"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert not _warnings(nb)


def _warnings(nb):
    """Warnings a reader would see: stderr lines naming a warning class."""
    return [line for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "stream" and o.get("name") == "stderr"
            for line in o.get("text", "").splitlines() if "Warning:" in line]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_show_no_warnings(path):
    """The executed notebooks in the repository show no warning (a tqdm warning with the
    build machine's path once opened each of them)."""
    assert _warnings(nbformat.read(path, as_version=4)) == []
