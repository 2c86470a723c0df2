"""Commands run from any directory: data/NAME defaults are found beside the installed package
(or in --data-dir), models/NAME in the checkout; paths given otherwise are used as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from attnlab import cli
from attnlab.core import datafiles
from tests.conftest import DATA, REPO
from tests.tiny_runs import ask_rows, train_tiny


def _attnlab(cwd, *argv):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop(datafiles.DATA_DIR_ENV, None)
    return subprocess.run([sys.executable, "-m", "attnlab", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True)


def test_a_command_runs_from_another_directory(tmp_path):
    out = _attnlab(tmp_path, "baseline")
    assert out.returncode == 0, out.stderr
    assert f'most frequent place in {DATA / "birth_places_train.tsv"}: "London"' in out.stdout
    assert "25/500 (5.0%)" in out.stdout


def test_data_dir_overrides_where_data_files_are_read(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "birth_places_train.tsv").write_text("Where was A born?\tLima\nWhere was B born?\tLima\n")
    (mine / "birth_dev.tsv").write_text("Where was C born?\tLima\nWhere was D born?\tOslo\n")
    out = _attnlab(tmp_path, "baseline", "--data-dir", str(mine))
    assert out.returncode == 0, out.stderr
    assert f'in {mine / "birth_places_train.tsv"}: "Lima"' in out.stdout and "1/2 (50.0%)" in out.stdout


def test_ask_finds_its_evidence_corpus_from_another_directory(tmp_path):
    run = train_tiny(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _attnlab(elsewhere, "ask", str(run), "Where was Ralf Wadephul born?", "--device", "cpu", "--abstain", "off")
    assert out.returncode == 0, out.stderr
    (row,) = ask_rows(out.stdout)
    assert row["question"] == "Where was Ralf Wadephul born?"
    assert row["evidence"].startswith(("supported by corpus line", "not supported: corpus line"))  # it read wiki.txt


def test_library_defaults_follow_the_directory_and_data_dir(tmp_path, monkeypatch):
    from attnlab.config.settings import DEFAULT_DEV

    monkeypatch.delenv(datafiles.DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert Path(DEFAULT_DEV) == DATA / "birth_dev.tsv"  # the checkout's copy
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "birth_dev.tsv").write_text("Where was A born?\tLima\n")
    assert Path(DEFAULT_DEV) == Path("data/birth_dev.tsv")  # the current directory's own wins
    monkeypatch.setenv(datafiles.DATA_DIR_ENV, str(tmp_path / "other"))
    assert Path(DEFAULT_DEV) == tmp_path / "other" / "birth_dev.tsv"


def test_a_wheel_install_finds_the_data_under_its_prefix(tmp_path, monkeypatch):
    installed = tmp_path / "prefix" / "share" / "attnlab" / "data"
    installed.mkdir(parents=True)
    (installed / "wiki.txt").write_text("A. A was born in Lima.\n")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(datafiles, "SOURCE_ROOT", tmp_path / "no-checkout")
    monkeypatch.delenv(datafiles.DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert datafiles.resolve("data/wiki.txt") == installed / "wiki.txt"
    assert datafiles.resolve("data/missing.txt") == Path("data/missing.txt")  # the error names it
    assert datafiles.resolve("elsewhere/wiki.txt") == Path("elsewhere/wiki.txt")


def test_pyproject_ships_every_data_file_the_commands_default_to():
    import tomllib

    shipped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    files = {Path(f).name for f in shipped["share/attnlab/data"]}
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices.values()
    defaults = {Path(v).name for p in commands for a in p._actions
                for v in (a.default if isinstance(a.default, list) else [a.default])
                if isinstance(v, str) and v.startswith("data/")}
    assert defaults and defaults <= files
    assert all((REPO / f).is_file() for f in shipped["share/attnlab/data"])
