"""The README and the docs site (issue 24): a README that answers first, a CLI reference and a
configuration page generated from the code, and no stale command line anywhere in the docs."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from attnlab import cli
from attnlab.config.settings import PRESETS, ModelConfig, TrainConfig
from attnlab.facts.settings import EditSettings, TraceSettings
from attnlab.trust.policy import AbstainPolicy

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DEMO_SETUP = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && .venv/bin/attnlab demo"
TEST_SETUP = ("python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[test]' "
              "&& .venv/bin/python -m pytest -q")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "scripts" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> dict:
    return next(a for a in cli.build_parser()._actions if a.dest == "command").choices


def _doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


# ------------------------------------------------------------------------- the README


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def test_readme_is_short_and_its_first_two_commands_are_the_setups():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first_two = [block.strip() for block in _code_blocks(text)[:2]]
    assert first_two == [DEMO_SETUP, TEST_SETUP]


def test_ci_runs_the_readmes_test_command_verbatim():
    assert TEST_SETUP in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_links_lead_to_files():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#]+)\)", text) if "://" not in t]
    assert targets and [t for t in targets if not (REPO / t).exists()] == []


def test_readme_asks_the_shipped_model_within_150_words():
    text = README.read_text(encoding="utf-8")
    at = text.index('attnlab ask models/cpu "Where was Alfred Mele born?"')
    assert len(text[:at].split()) < 150


def test_getting_started_python_example_runs(monkeypatch, capsys):
    text = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    examples = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "attnlab.load" in b]
    assert len(examples) == 1
    monkeypatch.chdir(REPO)
    exec(compile(examples[0], "docs/getting-started.md", "exec"), {})
    assert capsys.readouterr().out.startswith("Where was Alfred Mele born? -> ")


# ------------------------------------------------------------------------- generated pages


def test_cli_reference_has_a_section_for_every_command_and_flag():
    page = _generator().cli_markdown()
    for name, parser in _commands().items():
        assert f"\n## attnlab {name}\n" in page, name
        for action in parser._actions:
            for flag in action.option_strings:
                if action.help != "==SUPPRESS==":
                    assert flag in page, f"{name} {flag}"


def test_a_new_command_gets_its_section(monkeypatch):
    def register(command):
        command("hello", "say hello", lambda args: 0)

    monkeypatch.setattr(cli, "COMMANDS", cli.COMMANDS + [register])
    assert "\n## attnlab hello\n" in _generator().cli_markdown()


def test_configuration_page_lists_every_setting_and_preset():
    page = _generator().configuration_markdown()
    for cls in (ModelConfig, TrainConfig, TraceSettings, EditSettings, AbstainPolicy):
        for name in cls.__dataclass_fields__:
            assert f"| `{name}` |" in page, name
    for name, preset in PRESETS.items():
        assert f"### {name}\n" in page and preset.description in page


# ------------------------------------------------------------------------- command lines

# A line is not parsed when it is a usage synopsis or an elision, not a command: "[...]" marks
# optional parts, "..." stands for flags left out.
NOT_A_COMMAND = re.compile(r"\[|\.\.\.|<[A-Z]")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")  # RUN, NAME, LR: a value the reader fills in


def _argvs(line: str) -> list[list[str]]:
    """The attnlab arguments of each command a shell line runs (`a; b`, `a && b`, `a | b`)."""
    found = []
    for piece in re.split(r"&&|\||;", line):
        words = shlex.split(piece, comments=True)
        for i, word in enumerate(words):
            if word.endswith("attnlab") and (i == 0 or words[i - 1] == "-m" or "/" in word):
                found.append(words[i + 1:])
                break
    return found


def _command_lines(text: str) -> list[str]:
    """Shell lines in fenced blocks (continuations joined) and inline `attnlab ...` spans."""
    found = []
    for block in _code_blocks(text):
        found += [l.strip() for l in block.replace("\\\n", " ").splitlines()]
    found += [" ".join(s.split()) for s in re.findall(r"(?<!`)`((?:\S*/)?attnlab [^`]+)`", text)]
    return [l for l in found if re.search(r"(^|[\s/])attnlab\s", l) and not l.startswith("#")]


def _all_command_lines() -> list[tuple[str, str]]:
    lines = []
    for path in _doc_files():
        for line in _command_lines(path.read_text(encoding="utf-8")):
            if not NOT_A_COMMAND.search(line) and _argvs(line):
                lines.append((str(path.relative_to(REPO)), line))
    return lines


def test_the_docs_have_command_lines_to_check():
    assert len(_all_command_lines()) >= 40


def _parses(argv: list[str]) -> bool:
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code == 0  # --help and --version exit 0
    return True


def _value_for(action) -> str:
    """A value its flag accepts, for a placeholder: its first choice, else a small number."""
    if action is not None and action.choices:
        return str(list(action.choices)[0])
    for candidate in ("1", "0.5", "0"):
        try:
            if action is None or action.type is None or action.type(candidate) is not None:
                return candidate
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return "1"


def _filled(argv: list[str]) -> list[str]:
    """argv with each placeholder replaced by a value its flag accepts."""
    parser = _commands().get(argv[0])
    flags = {s: a for a in (parser._actions if parser else []) for s in a.option_strings}
    return [_value_for(flags.get(argv[i - 1])) if PLACEHOLDER.match(w) and i > 0 else w
            for i, w in enumerate(argv)]


@pytest.mark.parametrize("where, line", _all_command_lines())
def test_every_documented_command_line_parses(where, line):
    """Each command parses as written, or with its placeholders (RUN, LR) filled with a number;
    a bare `attnlab COMMAND` in prose names a command that exists."""
    for argv in _argvs(line):
        if len(argv) == 1 and not argv[0].startswith("-"):
            assert argv[0] in _commands(), f"{where}: `{line}` names no command"
            continue
        assert _parses(argv) or _parses(_filled(argv)), f"{where}: `{line}` does not parse"


def test_every_command_help_ends_with_an_example_that_parses():
    for name, parser in _commands().items():
        last = parser.format_help().rstrip().splitlines()[-1].strip()
        assert last.startswith(f"attnlab {name}"), f"{name}: --help ends with {last!r}"
        assert _parses(shlex.split(last)[1:]), f"{name}: the example `{last}` does not parse"


def test_a_stale_flag_is_caught():
    assert not _parses(["evaluate", "models/cpu", "--no-such-flag"])
    assert not _parses(["pretrain", "--preset", "cpu", "--batch-size", "B"])  # a placeholder alone


# ------------------------------------------------------------------------- Python in the docs


def _imports_in(text: str) -> list[str]:
    """Every attnlab import statement of a Markdown text's Python blocks."""
    return [line.strip() for block in re.findall(r"```python\n(.*?)```", text, re.S) for line in block.splitlines()
            if re.match(r"\s*(from attnlab[\w.]* import |import attnlab)", line)]


def _python_imports() -> list[tuple[str, str]]:
    """(file, statement) of every attnlab import in the docs' Python blocks."""
    return [(path.relative_to(REPO).as_posix(), statement) for path in _doc_files()
            for statement in _imports_in(path.read_text(encoding="utf-8"))]


def _import_error(statement: str) -> str | None:
    try:
        exec(statement, {})
    except ImportError as e:
        return str(e)
    return None


def test_the_docs_have_python_imports_to_check():
    assert len(_python_imports()) >= 4


@pytest.mark.parametrize("where, statement", _python_imports())
def test_every_documented_python_import_works(where, statement):
    error = _import_error(statement)
    assert error is None, f"{where}: `{statement}` fails: {error}"


def test_a_stale_python_import_is_caught():
    # the kind of line the comparisons guide once had: a module the package does not export
    text = "Text.\n\n```python\nimport attnlab\nfrom attnlab import no_such_module\nx = 1\n```\n"
    assert _imports_in(text) == ["import attnlab", "from attnlab import no_such_module"]
    assert _import_error("import attnlab") is None
    assert "no_such_module" in _import_error("from attnlab import no_such_module")
