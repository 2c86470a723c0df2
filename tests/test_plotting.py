"""One plotting set-up (issue 24): every figure is drawn through attnlab.core.plotting.pyplot,
which selects the Agg backend; no other module chooses a backend."""

from __future__ import annotations

import ast
from pathlib import Path

from attnlab.core.plotting import pyplot

PACKAGE = Path(__file__).resolve().parents[1] / "attnlab"


def _backend_choices(path: Path) -> list[int]:
    """Lines of ``path`` that call matplotlib.use(...) or import matplotlib.pyplot."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "matplotlib.use":
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name == "matplotlib.pyplot" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "matplotlib" and any(
                a.name == "pyplot" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_core_plotting_sets_up_matplotlib():
    found = {str(p.relative_to(PACKAGE)): _backend_choices(p) for p in PACKAGE.rglob("*.py")}
    assert {p: lines for p, lines in found.items() if lines} == {"core/plotting.py": [11, 12]}


def test_pyplot_draws_without_a_display(tmp_path):
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "f.png")
    plt.close(fig)
    assert (tmp_path / "f.png").stat().st_size > 0
