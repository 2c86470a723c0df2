"""`attnlab attention`: the heatmaps show the model's attention probabilities, the statistics
equal independent computations, every variant works, and the command writes its files."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.probing import attention_maps as maps
from attnlab import cli
from attnlab.model.attention import REGISTRY
from attnlab.model.checkpoint import save_checkpoint
from attnlab.config.settings import ModelConfig
from attnlab.probing.attention_maps import attention_weights, plot_layer, statistics_over
from attnlab.data.datasets import read_texts
from attnlab.model.gpt import GPT
from attnlab.data.vocab import Vocab

VOCAB = Vocab.from_text("abcdefgh ?\n")


def tiny(attention: str = "vanilla", causal: bool = True, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(vocab_size=len(VOCAB), block_size=24, n_layer=2, n_head=3, n_embd=24,
                           dropout=0.0, attention=attention, causal=causal)).eval()


@pytest.mark.parametrize("attention", sorted(REGISTRY))
def test_padded_batch_weights_equal_each_text_run_alone(attention):
    model = tiny(attention)
    rows = [VOCAB.encode("abc dd"), VOCAB.encode("h?"), VOCAB.encode("ggg fe ab")]
    weights, valid = attention_weights(model, rows)
    assert valid.sum(1).tolist() == [6, 2, 9]
    for b, r in enumerate(rows):
        with torch.no_grad():
            _, alone = model.run(torch.tensor([r]), need_weights=True)
        n = len(r)
        for w, a in zip(weights, alone):
            assert torch.allclose(w[b, :, :n, :n], a[0], atol=1e-6)
            assert torch.allclose(w[b, :, :n].sum(-1), torch.ones(w.shape[1], n), atol=1e-5)
            assert torch.equal(w[b, :, :n, n:], torch.zeros_like(w[b, :, :n, n:]))  # no padded keys
    if attention == "argmax":  # shown as its one-hot choices
        assert set(torch.unique(weights[0]).tolist()) <= {0.0, 1.0}


def test_non_causal_model_ignores_padding_keys():
    model = tiny(causal=False)
    rows = [VOCAB.encode("abcdefgh"), VOCAB.encode("ab")]
    weights, _ = attention_weights(model, rows)
    with torch.no_grad():
        _, alone = model.run(torch.tensor([rows[1]]), need_weights=True)
    assert torch.allclose(weights[1][1, :, :2, :2], alone[1][0], atol=1e-6)


def test_heatmaps_draw_the_models_attention_probabilities(tmp_path):
    model = tiny()
    ids = VOCAB.encode("abc d?ef")
    weights, _ = attention_weights(model, [ids])
    with torch.no_grad():
        _, reference = model.run(torch.tensor([ids]), need_weights=True)
    for l, w in enumerate(weights):
        path = tmp_path / f"layer{l}.png"
        drawn = plot_layer(w[0].numpy(), maps.labels(VOCAB, ids), path, title="t")
        assert len(drawn) == 3
        for k, m in enumerate(drawn):
            np.testing.assert_allclose(m, reference[l][0, k].numpy(), atol=1e-6)
        image = np.asarray(Image.open(path).convert("L"))
        assert image.shape[0] > 100 and image.shape[1] > 300  # three panels side by side
        assert image.std() > 10  # not a blank page
        assert path.stat().st_size > 5_000


def test_labels_make_whitespace_visible():
    assert maps.labels(VOCAB, VOCAB.encode("a b\n")) == ["a", "␣", "b", "↵"]


def test_statistics_over_texts_average_each_texts_statistics():
    model = tiny()
    texts = ["abc", "hgfedcba", "a?"]
    ent, dist, n = statistics_over(model, VOCAB, texts, batch_size=2)
    assert n == 3 and ent.shape == dist.shape == (2, 3)
    expected_e, expected_d = np.zeros((2, 3)), np.zeros((2, 3))
    for t in texts:
        with torch.no_grad():
            _, ws = model.run(torch.tensor([VOCAB.encode(t)]), need_weights=True)
        for l, w in enumerate(ws):
            a = w[0].double().numpy()  # (h, T, T)
            T = a.shape[-1]
            for k in range(3):
                rows_e = [-sum(p * math.log(p) for p in a[k, i] if p > 0) for i in range(T)]
                rows_d = [sum(a[k, i, j] * abs(i - j) for j in range(T)) for i in range(T)]
                expected_e[l, k] += np.mean(rows_e) / len(texts)
                expected_d[l, k] += np.mean(rows_d) / len(texts)
    np.testing.assert_allclose(ent, expected_e, rtol=1e-4)
    np.testing.assert_allclose(dist, expected_d, rtol=1e-4)


def test_read_texts_takes_the_question_column(tmp_path):
    f = tmp_path / "q.tsv"
    f.write_text("Where? \tParis\n\n  plain line\n")
    assert read_texts(f) == ["Where?", "plain line"]


def test_attention_command_writes_maps_and_tables(tmp_path, monkeypatch, capsys):
    ckpt = save_checkpoint(tmp_path / "ckpt.safetensors", tiny(), VOCAB, {"step": 0})
    over = tmp_path / "dev.tsv"
    over.write_text("abc\tx\nhh ga\ty\n")
    out = tmp_path / "maps"
    assert cli.main(["attention", str(ckpt), "ab cd", "--out-dir", str(out), "--over", str(over)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["layer0.png", "layer1.png"]
    assert printed.count("| 1 | 2 |") == 2  # layer 1 head 2 in both tables
    assert "averaged over 2 texts" in printed
    assert cli.main(["attention", str(ckpt)]) == 2  # neither TEXT nor --over


def test_maps_have_a_colour_bar_and_long_texts_stay_legible():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    for T, heads in [(8, 3), (120, 8)]:
        weights = rng.dirichlet(np.ones(T), size=(heads, T))
        chars = [chr(ord("a") + i % 26) for i in range(T)]
        fig, drawn = maps.layer_figure(weights, chars, "t")
        panels = [ax for ax in fig.axes if ax.get_title().startswith("head")]
        bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
        assert len(panels) == len(drawn) == heads and len(bars) == 1
        assert bars[0].get_ylabel() == "attention probability"
        width, height = fig.get_size_inches() * maps.DPI
        assert width <= 4 * maps.PANEL_MAX_INCHES * maps.DPI + 100 and height <= 2 * maps.PANEL_MAX_INCHES * maps.DPI
        xlabels = [t.get_text() for t in panels[0].get_xticklabels()]
        if T <= maps.MAX_LABELS:  # every character named, in order
            assert xlabels == chars
        else:  # every k-th, with its position, turned upright
            assert len(xlabels) <= maps.MAX_LABELS and xlabels[:2] == ["a 0", "d 3"]
            assert all(t.get_rotation() == 90 for t in panels[0].get_xticklabels())
        plt.close(fig)


def test_draw_attention_draws_every_layer_and_keeps_earlier_maps(tmp_path):
    from attnlab.core.paths import PathError

    model = tiny()
    drawn = maps.draw_attention(model, VOCAB, "abc d?ef", tmp_path)
    assert drawn.characters == 8 and drawn.paths == [tmp_path / f"layer{l}.png" for l in range(2)]
    assert all(p.stat().st_size > 5_000 for p in drawn.paths)
    weights, _ = attention_weights(model, [VOCAB.encode("abc d?ef")])
    entropy, _ = maps.head_statistics(weights)
    np.testing.assert_allclose(drawn.entropy, entropy[0].numpy(), atol=1e-6)
    before = drawn.paths[1].read_bytes()
    with pytest.raises(PathError, match="layer0.png.*already exists"):
        maps.draw_attention(model, VOCAB, "fed cba", tmp_path)  # refused, nothing replaced
    assert drawn.paths[1].read_bytes() == before
    maps.draw_attention(model, VOCAB, "fed cba", tmp_path, overwrite=True)
    assert drawn.paths[1].read_bytes() != before
