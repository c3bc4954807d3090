"""The README's "Your own equation" block, run as written, its printed output saved to
``docs/results/readme_own_equation.txt`` (the README's output block shows it rounded):

    python benchmarks/readme_output.py
"""

import contextlib
import io
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "readme_own_equation.txt"


def main():
    text = (ROOT / "README.md").read_text()
    start = text.index("### Your own equation")
    block = re.findall(r"```python\n(.*?)```", text[start:], flags=re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(block, {})
    OUT.write_text(out.getvalue())
    print(out.getvalue(), end="")
    print(f"-> {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
