"""The command line: every option documented with its default, clear one-line errors."""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys

import pytest

from attnlab import cli
from tests.conftest import DATA


def _help(*argv: str) -> str:
    buf = io.StringIO()
    with pytest.raises(SystemExit), _redirect(buf):
        cli.main([*argv, "--help"])
    return buf.getvalue()


class _redirect:
    def __init__(self, buf):
        self.buf = buf

    def __enter__(self):
        self.old, sys.stdout = sys.stdout, self.buf

    def __exit__(self, *exc):
        sys.stdout = self.old


REQUIRED = ["pretrain", "finetune", "evaluate", "ask", "baseline", "demo"]


def test_top_level_help_lists_the_commands():
    text = _help()
    for name in REQUIRED:
        assert name in text


ALL_COMMANDS = sorted(next(a for a in cli.build_parser()._actions if a.dest == "command").choices)


def test_issue_commands_exist():
    assert set(REQUIRED) | {"variants", "compare", "generate", "attention", "explore"} <= set(ALL_COMMANDS)


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_option_has_help_with_its_default(command):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    formatter = sub._get_formatter()
    for action in sub._actions:
        if action.dest == "help" or "--help-all" in action.option_strings or action.help == argparse.SUPPRESS:
            continue  # a deprecated old name (tests/test_structure.py)
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
        if not action.option_strings and action.required:
            continue  # a required positional has no default
        rendered = formatter._get_help_string(action).replace("%(default)s", str(action.default))
        assert rendered.count("(default") == 1, f"{command} {action.option_strings}: {rendered!r}"
        assert "(default: None)" not in rendered, f"{command} {action.option_strings}: {rendered!r}"


def test_no_compile_and_no_amp_are_shorthands():
    parser = cli.build_parser()
    args = parser.parse_args(["pretrain", "--no-compile", "--no-amp"])
    config = cli.train_config_from(args, "pretrain")
    assert (config.compile, config.amp) == ("off", "off")
    config = cli.train_config_from(parser.parse_args(["pretrain", "--compile", "on"]), "pretrain")
    assert (config.compile, config.amp) == ("on", "auto")


def test_training_flags_show_preset_defaults():
    assert "--learning-rate LEARNING_RATE peak learning rate (default: from --preset; cpu15: 0.003)" in " ".join(
        _help("pretrain").split())  # --help: the default preset's; --help-all: every preset's
    text = " ".join(_help("pretrain", "--help-all").split())
    assert re.search(r"--learning-rate .*cpu15: 0\.003; .*spec: 0\.006", text)
    assert "--grad-clip GRAD_CLIP clip the global gradient norm to this (0 = off) (default: 1.0 in every preset)" in text
    assert "--no-causal" in text and "--attention" in text and "--seed" in text


def test_baseline_command_prints_five_percent(capsys):
    assert cli.main(["baseline", "--train-file", str(DATA / "birth_places_train.tsv"),
                     "--eval-file", str(DATA / "birth_dev.tsv")]) == 0
    out = capsys.readouterr().out
    # the 95% Wilson interval of 25/500, by hand in test_evaluate.py: [0.034094, 0.072768]
    assert '"London"' in out and "25/500 (5.0%) [95% CI 3.4-7.3%]" in out


def test_baseline_prints_the_wilson_interval_of_its_count(tmp_path, capsys):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("Where was A born?\tLima\nWhere was B born?\tLima\n")
    dev.write_text("Where was C born?\tLima\nWhere was D born?\tOslo\n")
    assert cli.main(["baseline", "--train-file", str(train), "--eval-file", str(dev)]) == 0
    # 1/2, z = 1.96: centre = (0.5 + 3.8415/4) / (1 + 3.8415/2) = 0.5,
    # half = 1.96 * sqrt(0.25/2 + 3.8415/16) / 2.92073 = 0.40553 -> [0.0945, 0.9055]
    assert capsys.readouterr().out.rstrip().endswith(f"{dev}: 1/2 (50.0%) [95% CI 9.5-90.5%]")


def test_malformed_input_is_a_one_line_error_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Where was A born?\tParis\nWhere was B born?\tLima\tPeru\n")
    assert cli.main(["baseline", "--train-file", str(DATA / "birth_places_train.tsv"), "--eval-file", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{bad}:2:" in err


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["evaluate", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_console_script_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "attnlab", "--help"], capture_output=True, text=True, check=True)
    assert "pretrain" in out.stdout
