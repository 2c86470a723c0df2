"""`attnlab variants` (the table) and `attnlab compare` (every variant through the pipeline)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from attnlab.experiments import variants
from attnlab.cli import experiments as experiment_commands
from attnlab.model.attention import REGISTRY
from attnlab.config.settings import ModelConfig

PEOPLE = [("Ada Lovelace", "London"), ("Niels Bohr", "Copenhagen"), ("Marie Curie", "Warsaw"),
          ("Alan Turing", "London"), ("Emmy Noether", "Erlangen"), ("Kurt Godel", "Brno"),
          ("John Nash", "Bluefield"), ("Lise Meitner", "Vienna")]


def run_cli(argv: list[str]) -> int:
    """Parse with a parser holding only this module's commands, as cli.build_parser would."""
    parser = argparse.ArgumentParser(prog="attnlab")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, help, fn):
        p = sub.add_parser(name, help=help)
        p.set_defaults(func=fn)
        return p

    experiment_commands.register(command)
    args = parser.parse_args(argv)
    return args.func(args)


def write_data(tmp_path: Path) -> dict[str, Path]:
    corpus = "\n".join(f"{n}. Where was {n} born? {n} was born in {p} . {n} worked in {p} ."
                       for n, p in PEOPLE) + "\n"
    qa = "".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE)
    paths = {"corpus": tmp_path / "wiki.txt", "train": tmp_path / "train.tsv", "dev": tmp_path / "dev.tsv"}
    paths["corpus"].write_text(corpus)
    paths["train"].write_text(qa)
    paths["dev"].write_text("".join(qa.splitlines(keepends=True)[:4]))
    return paths


def test_variant_table_has_every_variant_with_its_counts(tmp_path, capsys):
    paths = write_data(tmp_path)
    assert run_cli(["variants", "--preset", "tiny", "--corpus", str(paths["corpus"]), "--rel-clip", "3"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split("|")[1].strip() for r in rows] == list(REGISTRY)
    vocab = len(set(paths["corpus"].read_text())) + 2  # PAD, MASK + corpus characters
    d, L, h = 32, 2, 2  # the tiny preset
    by_name = {r.split("|")[1].strip(): r.split("|") for r in rows}
    assert by_name["vanilla"][3].strip() == f"{L * 4 * (d * d + d):,}"
    assert by_name["relative"][3].strip() == f"{L * (4 * (d * d + d) + 7 * h):,}"  # (2k+1) h, k = 3
    for name, cls in REGISTRY.items():
        assert cls.score_cost in by_name[name][4] and cls.expresses and cls.expresses in by_name[name][5]
    info = {r.name: r for r in variants.variant_table(ModelConfig(vocab_size=vocab, block_size=80, n_layer=L,
                                                                  n_head=h, n_embd=d))}
    embeddings_and_rest = info["vanilla"].parameters - info["vanilla"].attention_parameters
    for r in info.values():  # only the attention differs between rows
        assert r.parameters - r.attention_parameters == embeddings_and_rest


def test_compare_trains_every_chosen_variant_and_writes_its_report(tmp_path, capsys, monkeypatch):
    from attnlab.experiments import results as experiments

    titles = []
    drawn = experiments.dev_accuracy_figure
    monkeypatch.setattr(experiments, "dev_accuracy_figure",
                        lambda rows, title: titles.append(title) or drawn(rows, title))
    paths = write_data(tmp_path)
    out = tmp_path / "compare"
    argv = ["compare", "--preset", "tiny", "--variants", "vanilla,rotary", "--max-steps", "1",
            "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--batch-size", "4",
            "--corpus", str(paths["corpus"]), "--train-file", str(paths["train"]),
            "--eval-file", str(paths["dev"]), "--out-dir", str(out), "--device", "cpu"]
    code = run_cli(argv)
    assert code == 0
    results = json.loads((out / "results.json").read_text())["rows"]
    assert [r["model"] for r in results] == ['baseline ("London")', "vanilla, no pretraining", "vanilla", "rotary"]
    dev_total = len(paths["dev"].read_text().splitlines())
    assert all(r["dev_total"] == dev_total for r in results)
    assert results[0]["dev_correct"] == sum(p == "London" for _, p in PEOPLE[:dev_total])
    for r in results[2:]:
        assert r["pretrain_loss"] > 0 and r["seconds"] > 0 and r["parameters"] > 0
        assert r["stored_total"] is not None and 0 <= r["stored"] <= r["stored_total"]
        assert (Path(r["run_dir"]) / "finetune" / "checkpoint.safetensors").exists()
    # the finetuned checkpoints record their variant
    from attnlab.model.checkpoint import load_checkpoint

    assert load_checkpoint(out / "rotary" / "finetune").model_config.attention == "rotary"
    # after the settings header: the rows, then each variant against the reference (tests/test_comparison.py)
    table, compared = (out / "results.md").read_text().split("\n\n")[1:3]
    assert table.startswith("| variant | parameters | pretrain loss | dev extracted (95% CI) | dev stored | time |")
    assert table.count("\n") == 1 + len(results)
    assert compared.startswith("| variant | seeds |") and compared.count("\n") == 1 + 2  # vanilla, rotary
    png = (out / "dev_accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert titles == [f"dev accuracy on {paths['dev'].name}, preset tiny"]
    assert str(out / "results.md") in capsys.readouterr().out

    # --reuse gathers finished runs instead of retraining them (checkpoints stay untouched)
    stamp = (out / "rotary" / "finetune" / "checkpoint.safetensors").stat().st_mtime_ns
    code = run_cli([*argv, "--reuse"])
    assert code == 0 and json.loads((out / "results.json").read_text())["rows"] == results
    assert (out / "rotary" / "finetune" / "checkpoint.safetensors").stat().st_mtime_ns == stamp
    assert capsys.readouterr().out.count("reusing the finished run") == 3


def test_compare_rejects_unknown_variants(tmp_path):
    paths = write_data(tmp_path)
    try:
        run_cli(["compare", "--preset", "tiny", "--variants", "vanilla,nope", "--corpus", str(paths["corpus"]),
                 "--train-file", str(paths["train"]), "--eval-file", str(paths["dev"]), "--out-dir", str(tmp_path / "c")])
    except ValueError as e:
        assert "nope" in str(e) and "vanilla" in str(e)
    else:
        raise AssertionError("an unknown variant must be refused")
    assert not (tmp_path / "c" / "vanilla").exists()  # refused before any training
    torch.manual_seed(0)  # keep later tests independent of this one's RNG use


def test_the_compare_chart_names_the_preset_and_shows_counts_and_intervals():
    import matplotlib.pyplot as plt
    import pytest
    from matplotlib.container import ErrorbarContainer

    from attnlab.answering.evaluate import Score, wilson_interval
    from attnlab.experiments.results import Row, dev_accuracy_figure

    rows = [Row('baseline ("London")', "baseline", Score(25, 500)),
            Row("vanilla", "variant", Score(5, 500), parameters=1000, pretrain_loss=1.5),
            Row("rotary", "variant", Score(13, 500), parameters=1000, pretrain_loss=1.4)]
    fig = dev_accuracy_figure(rows, "dev accuracy on birth_dev.tsv, preset quick")
    (ax,) = fig.axes
    assert "preset quick" in ax.get_title() and ax.get_xlim()[1] <= 100
    texts = [t.get_text().strip() for t in ax.texts]
    assert texts == ["25/500 (5.0%) [95% CI 3.4-7.3%]", "5/500 (1.0%) [95% CI 0.4-2.3%]",
                     "13/500 (2.6%) [95% CI 1.5-4.4%]"]
    (errorbars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    (bars,) = errorbars.lines[2]
    for segment, k in zip(bars.get_segments(), (25, 5, 13)):
        assert segment[:, 0].tolist() == pytest.approx([100 * b for b in wilson_interval(k, 500)])
    plt.close(fig)
