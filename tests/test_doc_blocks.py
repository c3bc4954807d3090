"""Every Python block of README.md and docs/guide.md runs as written, alone: each in a fresh
process of its own, nothing defined by a block before it. The README's two blocks of model
code are the source itself (tests/test_readme.py::test_model_code_is_the_source), not
examples to run. A block may not leave a warning of the library's own (a misfit, a referee's
disagreement, a fit that did not converge): the docs show fits that work."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide.md"]

#: the library's warnings a documented block must not raise
LIBRARY_WARNINGS = ("ModelMisfitWarning", "RefereeWarning", "ConvergenceWarning",
                    "UnfittedModelWarning")


def _blocks():
    out = []
    for page in PAGES:
        for k, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(),
                                             flags=re.S)):
            if block.startswith("@pyro_method"):          # the source, shown as it is
                continue
            out.append(pytest.param(block, id=f"{page.name}-{k + 1}"))
    return out


def test_the_pages_have_their_blocks():
    ids = [p.id for p in _blocks()]
    assert sum(i.startswith("README") for i in ids) == 6
    assert sum(i.startswith("guide") for i in ids) == 11


@pytest.mark.slow
@pytest.mark.parametrize("block", _blocks())
def test_a_block_runs_alone_as_written(block, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1200, env={"PIDKL_THREADS": "1",
                                                        **_environment()})
    assert done.returncode == 0, done.stderr[-3000:]
    raised = [line for line in done.stderr.replace("\r", "\n").splitlines()
              if any(f"{w}:" in line for w in LIBRARY_WARNINGS)]
    assert raised == [], raised


def _environment():
    import os
    return {k: v for k, v in os.environ.items() if k != "PIDKL_THREADS"}
