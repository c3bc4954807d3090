"""The records behind the docs: every record a page names exists, and every record is in
the index (docs/results/README.md, or the archive's for superseded runs)."""

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def _named(text):
    """Names and glob patterns in backticks."""
    return {n for chunk in re.findall(r"`([^`]+)`", text) for n in re.split(r"\\?\|", chunk)}


def test_every_record_a_page_names_exists():
    pages = [*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]
    missing = []
    for page in pages:
        for path in re.findall(r"docs/results/[\w./-]+", page.read_text()):
            path = path.rstrip(".")
            if "*" not in path and not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert missing == []


def test_every_record_is_in_the_index():
    named = _named((RESULTS / "README.md").read_text())
    unlisted = [p.name for p in RESULTS.iterdir()
                if p.name not in ("README.md", "archive")
                and not any(fnmatch.fnmatch(p.name, n.rstrip("/")) for n in named)]
    archived = _named((RESULTS / "archive" / "README.md").read_text())
    unlisted += [f"archive/{p.name}" for p in (RESULTS / "archive").iterdir()
                 if p.name != "README.md" and p.name not in archived]
    assert unlisted == []
