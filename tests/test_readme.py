"""The README's code blocks that a new user copies first run as written (fewer steps)."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(heading):
    """The ```python blocks of the README section that starts with ``heading``."""
    text = README.read_text()
    start = text.index(heading)
    nxt = re.compile(r"\n#{2,4} [A-Z]").search(text, start + len(heading))   # next heading
    end = nxt.start() if nxt else len(text)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def test_quick_start_runs_and_learns():
    (block,) = _python_blocks("## Quick start")
    namespace = {}
    assert "num_steps=1000" in block
    exec(block.replace("num_steps=1000", "num_steps=30"), namespace)   # prints RMSE, B, D
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == var.shape == namespace["data"].y_test.shape
    assert set(namespace["model"].equation_parameters()) == {"B", "D"}
    assert len(namespace["result"].losses) == 30


def test_your_own_equation_builds_a_model_and_fits():
    (block,) = _python_blocks("### Your own equation")
    namespace = {}
    exec(block, namespace)
    import pyro_pidkl as pk
    data = pk.datasets.first_order_ode()
    model = pk.PIDKL(data.X_train, data.y_train, namespace["eq"], m=5,
                     domain=pk.Box(t=(0.0, 1.0)))
    pk.fit(model, num_steps=3, progress=False)
    learned = model.equation_parameters()
    assert set(learned) == {"omega", "zeta"} and 0 <= learned["zeta"] <= 1
