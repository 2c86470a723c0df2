"""The face of the tool, as a new user meets it (issue 45, item 6): help texts that say what
is true and read easily, and a package namespace and docstring that teach."""

from __future__ import annotations

import json
import pydoc
from pathlib import Path

import pytest

import attnlab
from attnlab import cli
from attnlab.config.settings import PRESETS

ROOT = Path(__file__).resolve().parents[1]


def _help(*argv: str, capsys, flag: str = "--help") -> str:
    with pytest.raises(SystemExit):
        cli.main([*argv, flag])
    return capsys.readouterr().out


def test_only_the_recipe_that_made_the_shipped_model_says_so():
    made_by = json.loads((ROOT / "models/cpu/provenance.json").read_text())["preset"]
    claim = [p.name for p in PRESETS.values() if "shipped model" in p.description and "cpu60's" not in p.description]
    assert claim == [made_by] == ["cpu60"]


def test_defaults_read_easily(capsys):
    text = " ".join(_help("pretrain", capsys=capsys, flag="--help-all").split())
    assert "0.17024174327545114" not in text and "cpu15: 0.17;" in text  # --mix-ratio, 3 significant digits
    text = " ".join(_help("finetune", capsys=capsys).split())
    assert "cpu15: 1/10" not in text and "cpu15: 1 from --init, 10 from scratch" in text  # --epochs


@pytest.mark.parametrize("command", ["pretrain", "evaluate", "calibrate", "trace", "ask"])
def test_one_output_group_a_command(command, capsys):
    assert _help(command, capsys=capsys).count("\noutput:") == 1


def test_abstain_describes_the_modes_it_offers(capsys):
    text = " ".join(_help("ask", capsys=capsys).split())
    start = text.index("--abstain {", text.index("abstention (")) 
    flag = text[start:text.index("--abstain-below P", start + 1)]
    offered = flag[len("--abstain {"):flag.index("}")].split(",")
    assert offered == ["off", "auto", "names", "run"]
    assert "below:" not in flag and all(f"{mode}:" in flag for mode in offered)


def test_the_package_lists_its_public_names_only():
    names = dir(attnlab)
    assert not {"Any", "TYPE_CHECKING", "importlib"} & set(names)
    assert set(attnlab.__all__) <= set(names) and "__version__" in names
    assert all(getattr(attnlab, name) is not None for name in attnlab.__all__)


def test_help_of_load_explains_it_with_an_example():
    text = pydoc.render_doc(attnlab.load, renderer=pydoc.plaintext)
    assert len(text.splitlines()) > 15
    assert 'attnlab.load("models/cpu")' in text and "Example" in text


def _subparser(command: str):
    import argparse

    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


@pytest.mark.parametrize("command", ["pretrain", "finetune", "compare", "evaluate", "variants"])
def test_help_shows_the_common_flags_and_help_all_every_one(command, capsys):
    import argparse

    short = _help(command, capsys=capsys)
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help-all"])
    assert done.value.code == 0
    full = capsys.readouterr().out
    flags = [s for a in _subparser(command)._actions if a.help != argparse.SUPPRESS for s in a.option_strings]
    assert [f for f in flags if f not in full] == []
    assert len(short.splitlines()) < len(full.splitlines())
    assert "--help-all" in short
    if command == "pretrain":
        assert len(short.splitlines()) < 80
        assert "--mix-ratio" not in short and "--max-steps" in short


def test_a_flag_help_leaves_out_still_works():
    args = cli.build_parser().parse_args(["pretrain", "--mix-ratio", "0.5", "--objective", "lm", "--no-compile"])
    assert (args.mix_ratio, args.objective, args.compile) == (0.5, "lm", "off")


def _metrics(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text('{"step": 1, "tokens": 10, "loss": 2.0, "lr": 0.001}\n')
    return directory


def test_plot_labels_runs_of_the_same_name_by_their_directories(tmp_path):
    from attnlab.experiments.curves import run_labels

    a, b = _metrics(tmp_path / "a" / "pretrain"), _metrics(tmp_path / "b" / "pretrain")
    c = _metrics(tmp_path / "c" / "finetune")
    assert run_labels([a, b, c]) == ["a/pretrain", "b/pretrain", "finetune"]
    assert run_labels([a, a]) == ["pretrain (1)", "pretrain (2)"]
    assert run_labels([a / "metrics.jsonl"]) == ["pretrain"]


def test_ask_without_questions_reads_stdin_as_its_help_says(capsys):
    with pytest.raises(SystemExit):
        cli.main(["ask"])
    err = capsys.readouterr().err
    assert "checkpoint" in err and "questions" not in err  # questions are optional: stdin is read
    args = cli.build_parser().parse_args(["ask", "models/cpu"])
    assert args.questions == []
    assert "one per line on stdin" in _help("ask", capsys=capsys)
