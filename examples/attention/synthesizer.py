"""Dense synthesizer attention (Tay et al. 2020) as the course defines it, written as a student
would: each head's score row is synthesised from the query position alone,

    softmax(ReLU(X A_i + b_1) B_i + b_2 + causal mask) (X V_i),

with B_i (d/h x block_size) sliced to the keys present. No query-key dot product: the score of
key j depends on j only through its position.

Check it:    attnlab check-attention examples/attention/synthesizer.py:SynthesizerAttention --same-as synthesizer
Compare it:  attnlab compare --variants vanilla,examples/attention/synthesizer.py:SynthesizerAttention --seeds 3
"""

import torch
from torch import nn
from torch.nn import functional as F


class SynthesizerAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        head_size = config.n_embd // config.n_head
        self.w1 = nn.Linear(config.n_embd, config.n_embd)  # A_i and b_1 of every head
        self.w2 = nn.Parameter(torch.randn(config.n_head, head_size, config.block_size) * 0.02)  # B_i
        self.b2 = nn.Parameter(torch.zeros(config.block_size))
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        hidden = F.relu(self.w1(x)).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = hidden @ self.w2[:, :, :T] + self.b2[:T]  # (B, nh, T, T)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))
