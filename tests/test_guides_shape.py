"""Guides that teach (issue 45, item 3): a guide says how to do the thing and shows today's
figures; the dated history of how they were reached lives in the lab notebook and the changelog.
These checks keep it that way: no dated headings in a guide, a short results section in the
README, and no measured count quoted in a code comment."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDES = sorted((REPO / "docs" / "guides").glob("*.md")) + [REPO / "docs" / "getting-started.md"]
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
RESULTS_HEADING = re.compile(r"^## Results\b")
RESULTS_MAX_LINES = 40
# a measured count such as "451/500" or "358/400" in a comment line
COUNT = re.compile(r"\b\d{1,4}/(?:400|472|478|500)\b")


def _headings(text: str) -> list[str]:
    """Markdown headings, code blocks skipped (a shell comment there is not a heading)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line)
    return out


def test_there_are_guides():
    assert len(GUIDES) > 5
    assert all(p.exists() for p in GUIDES)


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_guide_headings_carry_no_dates(path):
    dated = [h for h in _headings(path.read_text(encoding="utf-8")) if DATE.search(h)]
    assert not dated, f"{path.name}: dated headings belong in docs/notebook.md: {dated}"


def readme_results_lines() -> list[str]:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if RESULTS_HEADING.match(line)), None)
    assert start is not None, "README.md has no '## Results' section"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_readme_results_section_is_short():
    section = readme_results_lines()
    assert len(section) <= RESULTS_MAX_LINES, (
        f"README's results section is {len(section)} lines (at most {RESULTS_MAX_LINES}: one table, "
        "a few sentences, links for the rest)")


def _comment_lines(path: Path) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if line.lstrip().startswith("#")]


def test_no_measured_count_in_code_comments():
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in sorted((REPO / "attnlab").rglob("*.py"))
             for n, line in _comment_lines(p) if COUNT.search(line)]
    assert not found, "measured counts belong in docs/notebook.md, not in comments:\n" + "\n".join(found)


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


def test_no_measured_count_in_docstrings():
    found = [f"{p.relative_to(REPO)}: {line.strip()}"
             for p in sorted((REPO / "attnlab").rglob("*.py"))
             for doc in _docstrings(p) for line in doc.splitlines() if COUNT.search(line)]
    assert not found, "measured counts belong in docs/notebook.md, not in docstrings:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for():
    assert _headings("# Title\n```bash\n# 2026-11-27 a shell comment\n```\n### Runs (2026-11-27, later)\n") == [
        "# Title", "### Runs (2026-11-27, later)"]
    assert DATE.search("### Runs (2026-11-27, later)")
    assert COUNT.search("# after the pretraining (303/500 dev) finetuning gave 337/500")
    assert not COUNT.search("# mix_ratio 0.681 = 2,000 of 2,937 lines; 1/2 of the rows")
