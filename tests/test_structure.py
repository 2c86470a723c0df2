"""The package's structure (issues 16 and 24): the layers of attnlab/ (every import goes down a
layer or stays inside its package), no import cycle, the library never imports the command line,
and every command shares one name per idea."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnlab import cli

PACKAGE = Path(__file__).resolve().parents[1] / "attnlab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom, modules) -> list[str]:
    """The attnlab modules a ``from X import a, b`` reads: X.a where that is a module, and X
    itself where a name is defined in it (``from . import masks`` reads masks only)."""
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
    return submodules + ([target] if len(submodules) < len(node.names) else [])


def import_graph() -> dict[str, set[str]]:
    """module -> the attnlab modules it imports (at any depth of its code: function-level
    imports count too)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = _resolve(module, is_package, node, files)
            else:
                continue
            edges |= {n for n in names if n in files and n != module}
        graph[module] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_graph_is_read_from_the_code():
    graph = import_graph()
    assert "attnlab.model.gpt" in graph["attnlab.training.trainer"]  # a module-level import
    assert "attnlab.cli.flags" in graph["attnlab.cli.training"]  # a relative one
    assert "attnlab.training.pipeline" in graph["attnlab.cli.training"]  # a function-level one


def test_no_import_cycle_in_attnlab():
    assert _cycle(import_graph()) is None


def test_a_cycle_is_found_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_library_module_imports_the_command_line():
    graph = import_graph()
    offenders = {m for m, edges in graph.items() if not m.startswith("attnlab.cli")
                 and m != "attnlab.__main__" and any(e.startswith("attnlab.cli") for e in edges)}
    assert offenders == set()


def _commands():
    return next(a for a in cli.build_parser()._actions if a.dest == "command").choices


SHARED = {"eval_file": "--eval-file", "out_dir": "--out-dir", "device": "--device", "preset": "--preset",
          "corpus": "--corpus", "train_file": "--train-file"}


@pytest.mark.parametrize("dest", sorted(SHARED))
def test_one_flag_name_per_idea(dest):
    for name, parser in _commands().items():
        shown = {s for a in parser._actions if a.dest == dest and a.help != "==SUPPRESS==" for s in a.option_strings}
        assert shown <= {SHARED[dest]}, f"{name}: {shown}"


@pytest.mark.parametrize("argv, dest, old", [
    (["evaluate", "run", "--file", "x.tsv"], "eval_file", "--file"),
    (["baseline", "--file", "x.tsv"], "eval_file", "--file"),
    (["compare", "--dev-file", "x.tsv"], "eval_file", "--dev-file"),
    (["pretrain", "--run-dir", "x"], "out_dir", "--run-dir"),
    (["finetune", "--run-dir", "x"], "out_dir", "--run-dir"),
    (["demo", "--out", "x"], "out_dir", "--out"),
    (["compare", "--out", "x"], "out_dir", "--out"),
    (["attention", "run", "--out", "x"], "out_dir", "--out"),
    (["trace", "run", "--out", "x"], "out_dir", "--out"),
    (["edit", "run", "--person", "P", "--place", "Q", "--out", "x"], "out_dir", "--out"),
    (["edit", "run", "--person", "P", "--place", "Q", "--dev", "x.tsv"], "eval_file", "--dev"),
    (["evaluate", "run", "--out", "x"], "predictions", "--out"),
    (["calibrate", "run", "--out", "x"], "out_dir", "--out"),
    (["calibrate", "run", "--file", "x.tsv"], "eval_file", "--file"),
    (["audit", "run", "--out", "x"], "out_dir", "--out"),
    (["audit", "run", "--dev-file", "x.tsv"], "eval_file", "--dev-file"),
])
def test_old_flag_names_still_work_and_say_they_are_deprecated(argv, dest, old, capsys):
    args = cli.build_parser().parse_args(argv)
    assert getattr(args, dest) == argv[-1]
    assert f"{old} is deprecated" in capsys.readouterr().err


def test_new_commands_join_with_their_register_hook(monkeypatch, capsys):
    def register(command):
        command("hello", "say hello", lambda args: print("hello") or 0)

    monkeypatch.setattr(cli, "COMMANDS", cli.COMMANDS + [register])
    assert cli.main(["hello"]) == 0 and capsys.readouterr().out == "hello\n"


# The layers, lowest first (docs/architecture.md). A module may import a module of its own
# package or of a package on a lower layer: never one above (upward) nor a sibling on the same
# layer (sideways). ``python -m attnlab`` and the package face ``attnlab`` sit on top.
LAYERS: dict[str, int] = {
    "core": 0, "_version": 0,
    "data": 1,
    "config": 2,
    "model": 3,
    "answering": 4, "probing": 4, "explore": 4,
    "training": 5, "trust": 5, "facts": 5, "interop": 5,
    "experiments": 6, "api": 6,
    "serve": 7,
    "cli": 8,
    "__main__": 9, "": 9,
}


def package_of(module: str) -> str:
    """``attnlab.model.attention.base`` -> ``model``; the face ``attnlab`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer or sideways to another package of its layer."""
    found = []
    for module, edges in sorted(graph.items()):
        here = package_of(module)
        for target in sorted(edges):
            there = package_of(target)
            if there != here and LAYERS[there] >= LAYERS[here]:
                way = "up" if LAYERS[there] > LAYERS[here] else "sideways"
                found.append(f"{module} -> {target} ({way}: layer {LAYERS[here]} -> {LAYERS[there]})")
    return found


def test_every_module_lives_in_a_layer():
    homeless = {m for m in import_graph() if package_of(m) not in LAYERS}
    assert homeless == set(), f"put these in a package of a layer (LAYERS): {sorted(homeless)}"


def test_every_import_goes_down_a_layer_or_stays_in_its_package():
    assert wrong_way(import_graph()) == []


def test_an_upward_or_sideways_import_is_caught():
    graph = {"attnlab.data.objectives": {"attnlab.answering.knowledge", "attnlab.data.vocab"},
             "attnlab.training.pipeline": {"attnlab.trust.calibration", "attnlab.model.gpt"},
             "attnlab.cli.trust": {"attnlab.cli.flags", "attnlab.core.paths"}}
    assert wrong_way(graph) == [
        "attnlab.data.objectives -> attnlab.answering.knowledge (up: layer 1 -> 4)",
        "attnlab.training.pipeline -> attnlab.trust.calibration (sideways: layer 5 -> 5)",
    ]



# ---- small functions (docs/architecture.md) ---------------------------------------------------
MAX_FUNCTION_LINES = 60


def long_functions(root: Path = PACKAGE, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``module:function:lines`` for every function (or method) of ``root`` longer than
    ``limit`` lines, from its ``def`` line to its last statement (docstring included)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.name}:{lines}")
    return found


def test_no_function_in_attnlab_is_longer_than_60_lines():
    assert long_functions() == []


def test_a_long_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (package / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(package) == ["pkg/m.py:long:61"]
