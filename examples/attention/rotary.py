"""Causal self-attention with rotary position embeddings (RoPE, Su et al. 2021), written as a
student would for the course: the assignment's CausalSelfAttention with the queries and keys
rotated, pair of coordinates (2i, 2i+1) by pair, by the angle t * 10000^(-2i/d) at position t.

Check it:    attnlab check-attention examples/attention/rotary.py:RotaryAttention --same-as rotary
Compare it:  attnlab compare --variants vanilla,examples/attention/rotary.py:RotaryAttention --seeds 3
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


def precompute_rotary_emb(dim, max_positions):
    """cos and sin of t * theta_i for every position t and pair i: (max_positions, dim // 2) each."""
    theta = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * theta
    return torch.stack([angles.cos(), angles.sin()])


def apply_rotary_emb(x, rope_cache):
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) of x (B, nh, T, hs) by its position's angle."""
    T = x.size(-2)
    cos, sin = rope_cache[0, :T].to(x.dtype), rope_cache[1, :T].to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class RotaryAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head = config.n_head
        head_size = config.n_embd // config.n_head
        assert head_size % 2 == 0, "rotary embeddings rotate pairs of coordinates"
        self.register_buffer("rope_cache", precompute_rotary_emb(head_size, config.block_size), persistent=False)
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k = apply_rotary_emb(q, self.rope_cache), apply_rotary_emb(k, self.rope_cache)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))
