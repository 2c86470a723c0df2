"""`attnlab plot`: training curves of several runs on shared axes, dev accuracy where logged."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest
from PIL import Image

from attnlab import cli
from attnlab.answering.evaluate import wilson_interval
from attnlab.experiments.curves import CURVES, DEV_LABEL, X_LABEL, read_metrics, training_figure
from tests.tiny_runs import train_tiny


def _write_run(directory, steps, evals=()):
    directory.mkdir(parents=True)
    rows = [{"step": s, "tokens": 100 * s, "loss": 3.0 / s, "lr": 1e-3, "tokens_per_s": 500.0 + s}
            for s in steps]
    rows += [{"step": s, "tokens": 100 * s, "dev_correct": c, "dev_total": 50} for s, c in evals]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def test_runs_share_the_axes_and_dev_accuracy_gets_a_panel(tmp_path):
    a = _write_run(tmp_path / "a", [1, 2, 3], evals=[(2, 5), (3, 9)])
    b = _write_run(tmp_path / "b", [1, 2])
    fig = training_figure([read_metrics(a), read_metrics(b)])
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == [label for _, label, _ in CURVES] + [DEV_LABEL]
    assert axes[-1].get_xlabel() == X_LABEL
    assert all(ax.get_shared_x_axes().joined(axes[0], ax) for ax in axes)
    for ax in axes[:3]:  # one curve per run, named in the legend
        assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    (loss_a, _), (dev_a,) = axes[0].get_lines(), axes[-1].containers  # run b logged no dev rows
    assert list(loss_a.get_xdata()) == [100, 200, 300] and list(loss_a.get_ydata()) == [3.0, 1.5, 1.0]
    points = dev_a.lines[0]
    assert list(points.get_xdata()) == [200, 300] and list(points.get_ydata()) == [10.0, 18.0]
    (bars,) = dev_a.lines[2]  # the 95% Wilson interval of 5/50 and 9/50, in percent
    (low5, high5), (low9, high9) = ([100 * v for v in wilson_interval(k, 50)] for k in (5, 9))
    ends = [segment[:, 1].tolist() for segment in bars.get_segments()]
    assert ends == [pytest.approx([low5, high5]), pytest.approx([low9, high9])]
    plt.close(fig)


def test_without_dev_rows_there_is_no_dev_panel(tmp_path):
    fig = training_figure([read_metrics(_write_run(tmp_path / "a", [1, 2]))])
    assert DEV_LABEL not in [ax.get_ylabel() for ax in fig.axes] and len(fig.axes) == len(CURVES)
    plt.close(fig)


def test_plot_command_writes_the_image_of_real_runs(tmp_path, capsys):
    runs = [train_tiny(tmp_path / name, "--seed", str(seed)) for seed, name in enumerate(["one", "two"])]
    out = tmp_path / "curves.png"
    assert cli.main(["plot", *map(str, runs), "--image", str(out)]) == 0
    assert "2 run(s) written to" in capsys.readouterr().out
    width, height = Image.open(out).size
    assert width == 800 and height == 100 * round(2.6 * len(CURVES), 1)


def test_out_still_names_the_image_and_says_it_is_deprecated(capsys):
    args = cli.build_parser().parse_args(["plot", "run", "--out", "x.png"])
    assert args.image == "x.png" and "--out is deprecated; use --image" in capsys.readouterr().err


def test_a_damaged_metrics_line_is_a_one_line_error(tmp_path, capsys):
    run = _write_run(tmp_path / "a", [1, 2])
    with open(run / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
    assert cli.main(["plot", str(run), "--image", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{run / 'metrics.jsonl'}:3: not a JSON object" in err
    assert cli.main(["plot", str(tmp_path / "nothing"), "--image", str(tmp_path / "x.png")]) == 2
    assert "no metrics here" in capsys.readouterr().err


def test_none_and_all_correct_draw_their_intervals(tmp_path):
    run = _write_run(tmp_path / "a", [1, 2], evals=[(1, 0), (2, 50)])
    fig = training_figure([read_metrics(run)])
    (bars,) = fig.axes[-1].containers[0].lines[2]
    (_, high0), (low50, _) = ([100 * v for v in wilson_interval(k, 50)] for k in (0, 50))
    ends = [segment[:, 1].tolist() for segment in bars.get_segments()]
    assert ends == [pytest.approx([0.0, high0]), pytest.approx([low50, 100.0])]
    plt.close(fig)
