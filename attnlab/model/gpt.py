"""The GPT of SPEC section 4, in the style of minGPT.

token embedding (+ or ++ absolute positions) -> dropout -> n_layer pre-LayerNorm blocks
(attention, then a 4x GELU MLP, each with a residual) -> final LayerNorm -> linear head.
The attention variant and the position scheme are chosen by name in the config.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, build_attention, masks, pin, plugin
from ..config.settings import ModelConfig
from .dropout import Dropout
from .fastpath import FastPath
from .positions import segment_positions, sinusoidal_table
from ..data.vocab import PAD_ID


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = build_attention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )
        self.mlp_drop = Dropout(config.dropout)

    @property
    def mlp_proj(self) -> nn.Linear:
        """The MLP's output matrix (out = W k + b, k: the hidden activation): what rank-one
        editing changes. A name over ``mlp[2]``, so the state-dict keys stay the course's."""
        return self.mlp[2]

    def forward(self, x: Tensor, positions: Tensor, **attn_kw) -> tuple[Tensor, Tensor | None]:
        a, weights = self.attn(self.ln1(x), positions, **attn_kw)
        x = x + a
        x = x + self.mlp_drop(self.mlp(self.ln2(x)))
        return x, weights


class GPT(FastPath, nn.Module):
    """``set_fast(False)`` switches every attention and dropout module to the plain path
    (attnlab/model/fastpath.py); ``fast`` reads the model's own state."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if plugin.is_plugin(config.attention):  # your own attention: its file's content, pinned
            config = dataclasses.replace(config, attention=pin(config.attention))
        self.config = config
        tok_width = config.n_embd if config.position_mode == "add" else config.n_embd - config.pos_width
        self.tok_emb = nn.Embedding(config.vocab_size, tok_width)
        if config.positions == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(config.block_size, config.pos_width))
        elif config.positions == "sinusoidal":
            self.register_buffer(
                "pos_emb", sinusoidal_table(config.block_size, config.pos_width), persistent=False
            )
        else:
            self.pos_emb = None
        if config.positions == "none" and config.position_mode == "concat":
            raise ValueError("--position-mode concat needs a position scheme (learned or sinusoidal)")
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # The edits the model holds, oldest first (one record each: attnlab/facts/correction.py),
        # and the gated edits' codebook (attnlab/model/codebook.py), which the first gated edit
        # attaches at a hook point; neither is in the state dict (a checkpoint stores them apart).
        self.edits: list[dict] = []
        self.edit_codebook: nn.Module | None = None
        if self.head.weight.is_meta:  # a layout (checkpoint checks, from_state): no values to draw
            return
        self.apply(self._init_weights)
        if config.positions == "learned":
            nn.init.normal_(self.pos_emb, mean=0.0, std=0.02)

    @classmethod
    def from_state(cls, config: ModelConfig, state: dict[str, Tensor]) -> GPT:
        """The model of ``config`` holding the weights ``state`` (a copy of them), built once and
        without the random initialisation the weights would overwrite: laid out on the meta
        device, then given its tensors. The tables that are no weights (non-persistent buffers:
        sinusoidal positions, rotary angles) are computed as a new model computes them, by the
        ``tables()`` of the module that holds them."""
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)
        for name, module in model.named_modules():
            tables = module.tables() if hasattr(module, "tables") else {}
            for key, value in tables.items():
                setattr(module, key, value)
            left = [k for k, b in module.named_buffers(recurse=False) if b.is_meta]
            if left:  # a new module's table that nobody computes: refuse rather than answer with garbage
                raise RuntimeError(f"{name or 'model'}: no tables() computes buffer(s) {', '.join(left)}")
        return model

    def tables(self) -> dict[str, Tensor]:
        """The model's tables that are no weights: the sinusoidal position table, if any."""
        if self.config.positions != "sinusoidal":
            return {}
        return {"pos_emb": sinusoidal_table(self.config.block_size, self.config.pos_width)}

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # SPEC 4: weights N(0, 0.02), biases 0, LayerNorm weight 1. Variant-specific
        # parameters are initialised by their own modules.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def num_parameters(self, attention_only: bool = False) -> int:
        if attention_only:
            return sum(p.numel() for b in self.blocks for p in b.attn.parameters())
        return sum(p.numel() for p in self.parameters())

    def no_weight_decay(self) -> set[str]:
        """Parameter names exempt from weight decay besides biases and LayerNorm weights:
        embeddings and position tables, as in minGPT, and what each attention variant declares
        (``Attention.no_decay``)."""
        names = {"tok_emb.weight"}
        if isinstance(self.pos_emb, nn.Parameter):
            names.add("pos_emb")
        for i, block in enumerate(self.blocks):
            names |= {f"blocks.{i}.attn.{n}" for n in block.attn.no_decay}
        return names

    # ------------------------------------------------------------------------------------------
    def embed(self, idx: Tensor, positions: Tensor) -> Tensor:
        tok = self.tok_emb(idx)  # (B, T, C or C - P)
        if self.pos_emb is None:
            return self.drop(tok)
        pos = self.pos_emb[positions]  # (B|1, T, P)
        if self.config.position_mode == "add":
            return self.drop(tok + pos)
        return self.drop(torch.cat([tok, pos.expand(tok.shape[0], -1, -1)], dim=-1))

    def run(
        self,
        idx: Tensor,
        *,
        positions: Tensor | None = None,
        allowed: Tensor | None = None,
        caches: list[KVCache] | None = None,
        key_positions: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """The full forward pass with every option; returns logits (B,T,V) and the per-layer
        attention weights (B,h,T,S) when ``need_weights``."""
        B, T = idx.shape
        if positions is None:
            if T > self.config.block_size:
                raise ValueError(f"sequence of length {T} exceeds block_size {self.config.block_size}")
            positions = torch.arange(T, device=idx.device)[None]  # (1, T)
        elif int(positions.max()) >= self.config.block_size:
            raise ValueError(f"position {int(positions.max())} exceeds block_size {self.config.block_size}")
        x = self.embed(idx, positions)
        weights: list[Tensor] = []
        for i, block in enumerate(self.blocks):
            x, w = block(
                x, positions, allowed=allowed, cache=None if caches is None else caches[i],
                key_positions=key_positions, need_weights=need_weights,
            )
            if need_weights:
                weights.append(w)
        logits = self.head(self.ln_f(x))
        if self.config.logit_scale != 1.0:
            logits = logits * self.config.logit_scale
        return logits, weights

    def forward(self, idx: Tensor, targets: Tensor | None = None, *,
                segments: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """The course interface: (logits, loss); PAD targets (id 0) are ignored by the loss.
        ``segments`` (B, T): rows of several sequences packed side by side (segment ids, -1 for
        padding); each position then sees only its own sequence, numbered from its start."""
        logits, _ = self.run(idx, **packed_rows(segments))
        return logits, (None if targets is None else lm_loss(logits, targets))


def packed_rows(segments: Tensor | None) -> dict[str, Tensor]:
    """``GPT.run`` options for rows of several sequences packed side by side (segment ids,
    -1 for padding): each position sees only its own sequence, numbered from its start.
    None (unpacked rows) gives no options."""
    if segments is None:
        return {}
    return dict(positions=segment_positions(segments), allowed=masks.segments(segments))


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """``model`` in eval mode (no dropout) for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def lm_loss(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
        ignore_index=PAD_ID, reduction=reduction,
    )
