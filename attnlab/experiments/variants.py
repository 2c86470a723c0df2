"""The attention variants side by side: the table of `attnlab variants` (what each one costs,
can express and computes). `attnlab compare` trains them: attnlab/experiments/compare.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..model.attention import REGISTRY
from ..config.settings import ModelConfig
from ..model.gpt import GPT


@dataclass(frozen=True)
class VariantInfo:
    name: str
    parameters: int  # the whole model
    attention_parameters: int  # all layers' attention modules
    score_cost: str
    expresses: str
    summary: str  # what it computes


def variant_table(config: ModelConfig) -> list[VariantInfo]:
    """One row per registered variant, for ``config`` with only the attention changed."""
    rows = []
    for name, cls in REGISTRY.items():
        torch.manual_seed(0)
        model = GPT(dataclasses.replace(config, attention=name))
        rows.append(VariantInfo(name, model.num_parameters(), model.num_parameters(attention_only=True),
                                cls.score_cost, cls.expresses, cls.summary))
    return rows


def format_variant_table(rows: list[VariantInfo]) -> str:
    lines = ["| variant | parameters | attention parameters | score cost | can / cannot express | computes |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    lines += [f"| {r.name} | {r.parameters:,} | {r.attention_parameters:,} | {r.score_cost} | "
              f"{r.expresses} | `{r.summary}` |" for r in rows]
    return "\n".join(lines)
