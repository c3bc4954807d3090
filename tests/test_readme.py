"""The README's code blocks that a new user copies first run as written (fewer steps)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(heading):
    """The ```python blocks of the README section that starts with ``heading``."""
    text = README.read_text()
    start = text.index(heading)
    nxt = re.compile(r"\n#{2,4} [A-Z]").search(text, start + len(heading))   # next heading
    end = nxt.start() if nxt else len(text)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def _blocks(heading):
    """All fenced blocks (any language) of the section that starts with ``heading``."""
    text = README.read_text()
    start = text.index(heading)
    nxt = re.compile(r"\n#{2,4} [A-Z]").search(text, start + len(heading))
    end = nxt.start() if nxt else len(text)
    return re.findall(r"```[a-z]*\n(.*?)```", text[start:end], flags=re.S)


def test_quick_start_runs_and_learns():
    (block,) = _python_blocks("## Quick start")
    namespace = {}
    assert "num_steps=1000" in block
    exec(block.replace("num_steps=1000", "num_steps=30"), namespace)   # prints RMSE, B, D
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == var.shape == namespace["data"].y_test.shape
    assert set(namespace["model"].equation_parameters()) == {"B", "D"}
    assert len(namespace["result"].losses) == 30


def test_your_own_equation_fits_the_conditioned_model():
    """The block runs as written (a full fit: under a second) and prints what the README's
    output block shows, to the digits it shows."""
    (block, output, _, _) = _blocks("### Your own equation")   # then the parts, VI/NUTS
    namespace = {}
    exec(block, namespace)                                   # prints RMSE, omega, zeta
    learned = namespace["model"].equation_parameters()
    assert set(learned) == {"omega", "zeta"} and 0 <= learned["zeta"] <= 1
    assert namespace["mean"].shape == namespace["data"].f_test.shape
    import pyro_pidkl as pk
    rmse = pk.diagnostics.rmse(namespace["mean"], namespace["data"].f_test)
    shown = dict(re.findall(r"'(omega|zeta)': ([0-9.]+)", output.splitlines()[0]))
    assert f"{rmse:.3g}" in output.splitlines()[0]
    assert all(f"{learned[k]:.{len(v.split('.')[1])}f}" == v for k, v in shown.items())


def test_model_code_is_the_source():
    """The README shows PIDKL.model and PhysicsConditionedGP.model as they are."""
    import inspect
    import textwrap

    import pyro_pidkl as pk
    pidkl, conditioned = _python_blocks("### The model is Pyro code")
    sources = [textwrap.dedent(inspect.getsource(m)) for m in
               (pk.PIDKL.model, pk.PhysicsConditionedGP.model)]
    assert [pidkl, conditioned] == sources


def test_the_physics_term_on_another_model_runs_as_shown():
    """The README's PI-SKL sentence: the same term carried by an SE-ARD GP, fitted."""
    import pyro_pidkl as pk
    from pyro_pidkl import physics

    readme = README.read_text().replace("\n", " ")
    assert "pk.models.SKL(X, y, physics=pk.physics.PhysicsTerm(eq," in readme
    data = pk.datasets.simulate_first_order_ode()
    term = pk.physics.PhysicsTerm(physics.first_order_ode(B=0.5, D=0.5), gamma=1.0, m=10,
                          domain=pk.Box(t=(0.0, 1.0)))
    model = pk.models.SKL(data.X_train, data.y_train, physics=term)
    assert isinstance(model.physics, pk.physics.PhysicsTerm) and isinstance(model, pk.models.SKL)
    result = pk.fit(model, num_steps=20, lr=0.01, seed=0, progress=False)
    assert len(result.losses) == 20 and set(model.equation_parameters()) == {"B", "D"}


@pytest.mark.slow
def test_the_three_inference_calls_run_on_the_fitted_model():
    """The README's full-VI and NUTS block (alone: it builds and fits its own model) with
    fewer steps and draws: the coefficients' posterior means near the truth, R-hat reported,
    the mixture's mean as accurate as the plug-in's, an ArviZ tree with the predictive."""
    import math
    _, _, _, block = _blocks("### Your own equation")
    namespace = {}
    short = (block.replace('guide="mvn")', 'guide="mvn", num_steps=150)')
             .replace("num_chains=2)", "num_chains=2, num_warmup=40, num_samples=40)"))
    assert short != block and short.count("num_steps=150") == 1 and "num_warmup=40" in short
    exec(short, namespace)
    for name in ("vi", "nuts"):
        s = namespace[name].summary(0.9)
        assert abs(s["omega"]["mean"] - 2.0) < 0.05 and abs(s["zeta"]["mean"] - 0.15) < 0.02, s
    assert math.isfinite(namespace["nuts"].summary()["omega"]["r_hat"])
    import pyro_pidkl as pk
    assert pk.diagnostics.rmse(namespace["mean"], namespace["data"].f_test) < 0.02
    assert namespace["tree"]["posterior_predictive"]["f"].shape[:2] == (2, 40)


def test_readme_is_a_front_door():
    assert len(README.read_text().splitlines()) <= 250


def test_local_links_of_the_readme_and_docs_resolve():
    """Every markdown link to a file of this repository (and its #anchor) exists."""
    def slug(heading):
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    root = README.parent
    pages = [README, *sorted((root / "docs").glob("*.md"))]
    anchors = {p.resolve(): {slug(h) for h in re.findall(r"^#+ (.*)$", p.read_text(), re.M)}
               for p in pages}
    broken = []
    for page in pages:
        for link in re.findall(r"\]\(([\w./#-]+)\)", page.read_text()):
            if link.startswith("http") or "/" not in link and "." not in link and "#" not in link:
                continue   # maths such as "](Z)", not a link
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page.resolve()
            if not target.exists() or (anchor and target in anchors
                                       and anchor not in anchors[target]):
                broken.append(f"{page.name}: {link}")
    assert broken == []


@pytest.mark.slow
def test_the_system_block_recovers_the_unmeasured_velocity():
    """The README's system block runs as written; the velocity, never observed, is
    recovered (truth: k = 4, c = 0.4)."""
    import torch

    import pyro_pidkl as pk
    (block,) = _python_blocks("### Systems, and components nobody measured")
    torch.manual_seed(0)
    namespace = {"pk": pk, "torch": torch}
    exec(block, namespace)
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == var.shape == (101, 2)
    t = torch.linspace(0, 10, 101, dtype=torch.float64)
    v = torch.exp(-0.2 * t) * (-0.2 * torch.cos(1.99 * t) - 1.99 * torch.sin(1.99 * t))
    assert float((mean[:, 1] - v).pow(2).mean().sqrt()) < 0.15
    assert abs(namespace["model"].equation_parameters()["k"] - 4.0) < 0.4


def test_the_pde_solve_block_reaches_its_accuracy():
    """The README's solver block at its defaults: relative L2 below 1e-4 (the issue's
    target for this problem at about 1,000 points)."""
    import contextlib
    import io

    (block,) = _python_blocks("### Solving a PDE from its boundary values")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(block.replace("pk.fit(model)", "pk.fit(model, progress=False)"), {})
    assert float(out.getvalue().split()[-1]) < 1e-4
