"""`attnlab --help` and `attnlab COMMAND --help` start fast: no torch import until a command
runs (issue 45, item 5). The check runs in a fresh interpreter, as the program does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECK = r"""
import contextlib, io, sys
from attnlab import cli

parser = cli.build_parser()
commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
for argv in [["--help"], *([name, "--help"] for name in commands)]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main(argv)
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
    assert "torch" not in sys.modules, f"attnlab {' '.join(argv)} imported torch"
print(len(commands))
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_help_of_every_command_imports_no_torch():
    done = _run(CHECK)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 18  # every command was asked for its help


def test_the_package_and_its_lazy_names_import_no_torch_until_used():
    done = _run("import sys, attnlab, attnlab.data, attnlab.model, attnlab.model.attention as a, attnlab.explore as e\n"
                "assert 'torch' not in sys.modules\n"
                "assert a.names()[0] == 'vanilla' and 'copy' in e.TOPIC_NAMES\n"
                "assert 'torch' not in sys.modules\n"
                "assert attnlab.GPT.__name__ == 'GPT' and 'torch' in sys.modules")
    assert done.returncode == 0, done.stderr


def test_the_check_sees_a_torch_import():
    done = _run(CHECK.replace("from attnlab import cli", "import torch\nfrom attnlab import cli"))
    assert done.returncode != 0 and "imported torch" in done.stderr


def test_the_torch_free_lists_name_what_is_registered():
    from attnlab import explore
    from attnlab.model.attention import REGISTRY, registry

    assert {name: cls.name for name, cls in REGISTRY.items()} == {name: name for name in registry.VARIANTS}
    assert explore.TOPIC_NAMES == tuple(explore.TOPICS)
