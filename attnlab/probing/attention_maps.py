"""Attention heatmaps and per-head statistics (the library of `attnlab attention`).

For one text: a PNG per layer (one panel per head, queries down, keys across, the characters on
both axes) and a table of each head's mean entropy and mean attention distance. With ``--over
FILE`` the same statistics averaged over a file of texts. The weights come from the model's
explicit attention path (``GPT.run(need_weights=True)``), so every variant works; argmax
attention shows its one-hot choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..core.progress import progress_bar
from ..model.attention import masks
from ..model.gpt import GPT, evaluating
from ..model.hooks import capturing
from ..core.outputs import refuse_existing
from ..core.paths import save_figure
from .heads import head_statistics
from ..data.vocab import PAD_ID, Vocab, visible
from ..core.plotting import pyplot

# ---- weights ---------------------------------------------------------------------------------
@torch.no_grad()
def attention_weights(model: GPT, rows: list[list[int]]) -> tuple[list[Tensor], Tensor]:
    """Per-layer attention weights (B, h, T, T) for right-padded rows, and valid (B, T).

    Padded keys are masked out (this matters for a --no-causal model) and a padded query sees
    only itself, so each row's real weights are exactly those of the row run alone."""
    device = next(model.parameters()).device
    T = max(len(r) for r in rows)
    if T > model.config.block_size:
        raise ValueError(f"a text of {T} characters exceeds the model's block_size {model.config.block_size}")
    idx = torch.full((len(rows), T), PAD_ID, dtype=torch.long, device=device)
    valid = torch.zeros(len(rows), T, dtype=torch.bool, device=device)
    for b, r in enumerate(rows):
        idx[b, : len(r)] = torch.tensor(r, device=device)
        valid[b, : len(r)] = True
    allowed = masks.padded(valid, is_causal=model.config.causal)  # (B, 1, T, T)
    names = [f"blocks.{layer}.attn.pattern" for layer in range(model.config.n_layer)]
    with evaluating(model), capturing(model, names) as patterns:  # the hook points run_with_cache reads
        model.run(idx, allowed=allowed, need_weights=True)
    return [patterns[n].float() for n in names], valid


def labels(vocab: Vocab, ids: list[int]) -> list[str]:
    """Axis labels: the characters, with whitespace made visible."""
    return [visible(c, spaces=True) for c in vocab.decode(ids)]


# ---- drawing -----------------------------------------------------------------------------------
# Long texts: a panel grows with the text up to PANEL_MAX_INCHES, and at most MAX_LABELS
# characters are named per axis (every k-th, with its position), so a 120-character map of
# 8 heads is about 2100 x 1000 pixels with readable labels instead of 6640 x 3320.
PANEL_MAX_INCHES = 5.0
MAX_LABELS = 40
DPI = 100


def plot_layer(weights: np.ndarray, chars: list[str], path: str | Path, title: str = "") -> list[np.ndarray]:
    """Draw one layer's heads (h, T, T) as a grid of heatmaps into a PNG; return the matrices
    as read back from the drawn images (so a test can compare what is on the page)."""
    plt = pyplot()

    fig, drawn = layer_figure(weights, chars, title)
    save_figure(fig, path, dpi=DPI)
    plt.close(fig)
    return drawn


def layer_figure(weights: np.ndarray, chars: list[str], title: str = ""):
    """The figure of one layer's heads with a shared colour bar; returns (figure, drawn)."""
    plt = pyplot()

    h, T, _ = weights.shape
    cols = min(h, 4)
    rows = (h + cols - 1) // cols
    size = min(PANEL_MAX_INCHES, max(3.0, 0.13 * T + 1.0))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size + 1.0, rows * size), squeeze=False,
                             layout="constrained")
    ticks, tick_labels = axis_labels(chars)
    fontsize = max(4, min(8, int(0.8 * 72 * size / max(len(ticks), 1))))
    drawn, image = [], None
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= h:
            ax.axis("off")
            continue
        image = ax.imshow(weights[k], vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
        drawn.append(np.asarray(image.get_array(), dtype=np.float64))
        ax.set_title(f"head {k}", fontsize=9)
        ax.set_xticks(ticks, tick_labels, fontsize=fontsize, rotation=90 if len(ticks) < T else 0)
        ax.set_yticks(ticks, tick_labels, fontsize=fontsize)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention probability")
    if title:
        fig.suptitle(title)
    return fig, drawn


def axis_labels(chars: list[str]) -> tuple[list[int], list[str]]:
    """Tick positions and labels: every character, or for long texts every k-th character
    with its position (at most MAX_LABELS)."""
    step = -(-len(chars) // MAX_LABELS)
    if step == 1:
        return list(range(len(chars))), list(chars)
    ticks = list(range(0, len(chars), step))
    return ticks, [f"{chars[i]} {i}" for i in ticks]


def statistics_table(entropy: np.ndarray, distance: np.ndarray) -> str:
    """Markdown table of (L, h) entropies (nats) and mean distances (characters)."""
    L, h = entropy.shape
    lines = ["| layer | head | entropy (nats) | mean distance (chars) |", "| --- | --- | --- | --- |"]
    for l in range(L):
        for k in range(h):
            lines.append(f"| {l} | {k} | {entropy[l, k]:.3f} | {distance[l, k]:.2f} |")
    return "\n".join(lines)


def statistics_over(model: GPT, vocab: Vocab, texts: list[str], *, batch_size: int = 64,
                    source: str = "<texts>") -> tuple[np.ndarray, np.ndarray, int]:
    """(L, h) entropy and distance averaged over texts (each text's mean over its positions
    counts once); texts longer than the block are cut to it. Returns also the count."""
    block = model.config.block_size
    rows = [vocab.encode(t[:block], source=source, line=i + 1) for i, t in enumerate(texts)]
    ent_sum = dist_sum = None
    batches = range(0, len(rows), batch_size)
    for start in progress_bar(batches, desc="attention", disable=len(batches) < 4):
        weights, valid = attention_weights(model, rows[start : start + batch_size])
        ent, dist = head_statistics(weights, valid)  # (B, L, h)
        ent_sum = ent.sum(0) if ent_sum is None else ent_sum + ent.sum(0)
        dist_sum = dist.sum(0) if dist_sum is None else dist_sum + dist.sum(0)
    n = len(rows)
    return (ent_sum / n).cpu().numpy(), (dist_sum / n).cpu().numpy(), n


@dataclass(frozen=True)
class DrawnText:
    """One text's attention maps as drawn: its length, the PNG of each layer, and each head's
    entropy and distance, (L, h)."""

    characters: int
    paths: list[Path]
    entropy: np.ndarray
    distance: np.ndarray


def draw_attention(model: GPT, vocab: Vocab, text: str, out_dir: str | Path, *, overwrite: bool = False,
                   source: str = "<argument>") -> DrawnText:
    """Draw every layer's heads for ``text`` into ``out_dir``/layerN.png (files already there are
    refused unless ``overwrite``: outputs.refuse_existing) and measure its head statistics."""
    ids = vocab.encode(text, source=source)
    weights, _ = attention_weights(model, [ids])
    paths = [Path(out_dir) / f"layer{layer}.png" for layer in range(model.config.n_layer)]
    refuse_existing(paths, overwrite)
    chars = labels(vocab, ids)
    for layer, (w, path) in enumerate(zip(weights, paths)):
        plot_layer(w[0].cpu().numpy(), chars, path, title=f"layer {layer}: {text!r}")
    ent, dist = head_statistics(weights)
    return DrawnText(len(ids), paths, ent[0].cpu().numpy(), dist[0].cpu().numpy())
