"""Generate the docs site's reference pages from the code, at build time (mkdocs-gen-files runs
this file; mkdocs.yml names it): the CLI reference from the real argparse parser, and the
configuration page from the config dataclass fields and the presets. Nothing generated is
committed, so the pages cannot go stale. tests/test_docs.py checks the output."""

from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager

from attnlab import cli
from attnlab.cli import flags
from attnlab.config.settings import PRESETS, ModelConfig, TrainConfig, cli_fields
from attnlab.facts.settings import EditSettings, TraceSettings
from attnlab.trust.policy import AbstainPolicy

HELP_COLUMNS = "100"  # the width --help is read at (issue 24)


@contextmanager
def _columns(width: str):
    """argparse sizes help to $COLUMNS; pin it so the page does not depend on the terminal."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def commands() -> dict:
    """Every registered command: name -> its argparse parser, in registration order."""
    parser = cli.build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices


def cli_markdown() -> str:
    """The CLI reference: ``attnlab --help``, then one section per command with its --help."""
    with _columns(HELP_COLUMNS):
        parts = ["# CLI reference", "",
                 "Generated from the `attnlab` argparse parser when the docs are built: every command",
                 "and flag, exactly as `attnlab COMMAND --help-all` prints it (`--help` shows the common ones).", "",
                 "## attnlab", "", "```text", cli.build_parser().format_help().rstrip(), "```", ""]
        for name, parser in commands().items():
            parts += [f"## attnlab {name}", "", "```text", flags.format_help_all(parser).rstrip(), "```", ""]
    return "\n".join(parts)


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _fields_table(cls) -> list[str]:
    rows = ["| setting | flag | default | what it is |", "| --- | --- | --- | --- |"]
    flags = {f.name for f in cli_fields(cls)}
    for f in dataclasses.fields(cls):
        name = f.metadata.get("flag") or f"--{f.name.replace('_', '-')}"  # a flag named otherwise says so
        flag = f"`{name}`" if f.name in flags else "(not a flag)"
        rows.append(f"| `{f.name}` | {flag} | `{_cell(f.default)}` | {_cell(f.metadata.get('help', ''))} |")
    return rows


def _changed(config) -> str:
    """The fields of a TrainConfig that differ from TrainConfig's defaults."""
    default = TrainConfig()
    diffs = [f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
             if getattr(config, f.name) != getattr(default, f.name)]
    return ", ".join(diffs) or "(the defaults)"


def _presets_section() -> list[str]:
    lines = ["## Presets", "", "`--preset NAME` picks a model shape and the three training runs of the experiment;",
             "any flag overrides one setting. Training settings are listed where they differ from the",
             "defaults above.", ""]
    for preset in PRESETS.values():
        model = ", ".join(f"{k}={v!r}" for k, v in preset.model.items()) or "(the defaults)"
        lines += [f"### {preset.name}", "", _cell(preset.description), "",
                  f"- model: `{model}`", f"- pretrain: `{_changed(preset.pretrain)}`",
                  f"- finetune: `{_changed(preset.finetune)}`",
                  f"- finetune without pretraining: `{_changed(preset.finetune_scratch)}`", ""]
    return lines


def configuration_markdown() -> str:
    """The configuration page: every field of ModelConfig and TrainConfig, then the presets."""
    lines = ["# Configuration", "",
             "Generated from `attnlab.config` when the docs are built. Each setting is a field of a",
             "frozen dataclass whose help and bounds also make its command-line flag; runs save",
             "them in `config.json`, which `--config FILE` reads back.", "",
             "## Model settings (`ModelConfig`)", "", *_fields_table(ModelConfig), "",
             "## Training settings (`TrainConfig`)", "", *_fields_table(TrainConfig), "",
             "## Method settings", "",
             "The settings of `trace`, `edit` and abstention are typed objects too, saved with their",
             "results (`trace.json`, `edit.json`, `calibration.json`) and taken by the Python API.", "",
             "### Tracing (`attnlab.facts.settings.TraceSettings`)", "", *_fields_table(TraceSettings), "",
             "### Editing (`attnlab.facts.settings.EditSettings`)", "", *_fields_table(EditSettings), "",
             "### Abstention (`attnlab.trust.policy.AbstainPolicy`)", "", *_fields_table(AbstainPolicy), "",
             *_presets_section()]
    return "\n".join(lines)


PAGES = {"reference/cli.md": cli_markdown, "reference/configuration.md": configuration_markdown}

if __name__ == "<run_path>":  # run by mkdocs-gen-files during `mkdocs build`
    import mkdocs_gen_files

    for path, make in PAGES.items():
        with mkdocs_gen_files.open(path, "w") as page:
            page.write(make())
