"""Log lines go through Python's logging (issue 25, item 7): a library user silences them with the
``attnlab`` logger's level; every command takes --quiet (results, warnings and errors only) and
--verbose (details too)."""

from __future__ import annotations

import logging

import pytest

from attnlab import cli
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.core import logs
from attnlab.training.pipeline import pretrain
from tests.conftest import DATA
from tests.tiny_runs import train_tiny

TINY = ModelConfig(block_size=48, n_layer=1, n_head=1, n_embd=16, dropout=0.0)
STEPS = TrainConfig(epochs=1, batch_size=4, max_steps=2, checkpoint_every=0, log_every=1, warmup_tokens=10, seed=0)


@pytest.fixture
def package_logger():
    """The ``attnlab`` logger, put back as it was afterwards."""
    logger = logging.getLogger("attnlab")
    level = logger.level
    yield logger
    logger.setLevel(level)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("logs") / "run")


def _library_pretrain(tiny_data, run_dir):
    return pretrain(TINY, STEPS, corpus=tiny_data["corpus"], run_dir=run_dir, device="cpu")


def test_a_library_training_call_logs_through_the_attnlab_logger(tiny_data, tmp_path, capsys, package_logger):
    _library_pretrain(tiny_data, tmp_path / "loud")
    assert "pretraining vanilla (" in capsys.readouterr().out  # the default: shown, as before
    package_logger.setLevel(logging.ERROR)
    _library_pretrain(tiny_data, tmp_path / "silent")
    captured = capsys.readouterr()
    assert captured.out == "" and "pretrain" not in captured.err  # no note, no progress bar
    assert (tmp_path / "silent" / "checkpoint.safetensors").is_file()


def test_a_program_can_take_the_lines_into_its_own_logging(tiny_data, tmp_path, capsys, package_logger):
    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record)

    handler = Collect()
    package_logger.addHandler(handler)
    try:
        _library_pretrain(tiny_data, tmp_path / "run")
    finally:
        package_logger.removeHandler(handler)
    assert any(r.levelno == logging.INFO and r.getMessage().startswith("pretraining vanilla (") for r in seen)


def test_every_command_takes_quiet_and_verbose():
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert len(commands) >= 15
    for name, sub in commands.items():
        flags = {f for action in sub._actions for f in action.option_strings}
        assert {"--quiet", "-q", "--verbose", "-v"} <= flags, name


def test_quiet_and_verbose_together_are_refused(capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(["variants", "--quiet", "--verbose"])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_quiet_pretraining_prints_its_summary_only(tmp_path, capsys):
    train_tiny(tmp_path / "run", "--quiet")
    captured = capsys.readouterr()
    assert captured.out.startswith("pretraining done: 4 steps,")  # the result, and nothing before it
    assert "next: attnlab finetune" in captured.out
    assert captured.err == ""  # no progress, no notes


def test_default_pretraining_says_what_it_does(tmp_path, capsys):
    train_tiny(tmp_path / "run")
    out = capsys.readouterr().out
    assert 0 <= out.index("pretraining vanilla (") < out.index("\npretraining done: 4 steps,")


def test_verbose_adds_the_options_and_the_files_read(tmp_path, capsys):
    train_tiny(tmp_path / "run", "--verbose")
    err = capsys.readouterr().err
    assert "attnlab pretrain: " in err and "max_steps=4" in err
    assert f"--corpus: {DATA / 'wiki.txt'} (" in err


def test_quiet_evaluate_keeps_its_score_and_drops_its_notes(run, tmp_path, capsys):
    questions = tmp_path / "dev.tsv"
    questions.write_text("Where was Ada Lovelace born?\tLondon\n", encoding="utf-8")
    assert cli.main(["evaluate", str(run), "--eval-file", str(questions), "--device", "cpu", "--quiet",
                     "--predictions", str(tmp_path / "p.txt")]) == 0
    captured = capsys.readouterr()
    assert f"{questions}: 0/1" in captured.out or f"{questions}: 1/1" in captured.out
    assert "--abstain names (the default for" not in captured.out + captured.err  # a note


def test_verbose_ask_names_the_loaded_model(run, capsys):
    assert cli.main(["ask", str(run), "Where was Ada Lovelace born?", "--device", "cpu", "--abstain", "off",
                     "--evidence", "", "-v"]) == 0
    assert f"loaded {run / 'checkpoint.safetensors'}: " in capsys.readouterr().err


def test_the_level_is_the_commands_own(run, capsys, package_logger):
    package_logger.setLevel(logging.WARNING)
    assert cli.main(["ask", str(run), "Where was Ada Lovelace born?", "--device", "cpu", "--abstain", "off",
                     "--evidence", "", "--quiet"]) == 0
    assert package_logger.level == logging.WARNING  # put back after the command


def test_results_and_notes_are_levels_of_one_logger(capsys, package_logger):
    package_logger.setLevel(logs.level_for(quiet=True))
    logs.note("a note")
    logs.result("a result")
    logs.detail("a detail")
    assert capsys.readouterr().out == "a result\n"
    package_logger.setLevel(logs.level_for(verbose=True))
    logs.detail("a detail")
    logs.note("to stderr", stderr=True)
    assert capsys.readouterr().err == "a detail\nto stderr\n"
