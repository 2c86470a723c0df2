"""Plain finetuning on the one question (``attnlab edit --method finetune``): the baseline that
published editors are measured against (FT-L in ROME, Meng et al. 2022, and EasyEdit: finetune
the one MLP a rank-one edit would change, here its output matrix ``blocks[layer].mlp_proj``).

The layer's output matrix (weight and bias) in a copy of the model is trained by Adam on the
edit input (edit.edit_input: the same teacher-forced sequence the other editors write: in the
recall format the model's own recalled line with its answer replaced by the new place, then
``⁇PLACE⁇``), checking every few steps whether the model answers the new place and stopping as
soon as it does (early stop: the fewest steps that work). It adds no parameters, and nothing
keeps the change local: every other answer may move. ``layer=None`` trains every weight of the
model instead (it moved almost every other answer of models/cpu: docs/guides/editing-local.md).
An edit that does not answer the new place within the step budget is an EditFailed, and
nothing is written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ..data.vocab import Vocab
from ..model.gpt import GPT, lm_loss
from .edit import EditInput, _target, answer_of, edit_input
from .errors import EditFailed


@dataclass(frozen=True)
class Finetuned:
    target: EditInput  # the sequence trained on
    steps: int  # Adam steps taken (the first that made the model answer the new place)
    loss_before: float  # mean negative log-likelihood of the edit input's predicted characters
    loss_after: float  # ... at the last step


def finetune_edit(model: GPT, vocab: Vocab, name: str, place: str, layer: int | None, *, lr: float = 1e-3,
                  steps: int = 100, check_every: int = 2, relation: str | None = None) -> tuple[GPT, Finetuned]:
    """A copy of ``model`` (unchanged) whose ``layer``'s MLP output matrix (every weight, for
    None) is finetuned on the edit input until it answers ``place``; raises EditFailed when
    ``steps`` run out first. ``relation``: which answer of a model of several relations."""
    model.eval()
    target = edit_input(model, vocab, name, place, relation)
    x, y = _target(vocab.encode(target.text), target.prompt_len, model.tok_emb.weight.device, target.given)
    edited = copy.deepcopy(model)  # in eval mode: no dropout, the steps are deterministic
    # Adam over the model's own weights (a gated edit's codebook holds buffers, never trained).
    trained = edited.parameters() if layer is None else edited.blocks[layer].mlp_proj.parameters()
    opt = torch.optim.Adam(trained, lr=lr)
    losses = []
    for step in range(1, steps + 1):
        loss = lm_loss(edited.run(x)[0], y)
        losses.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % check_every == 0 and answer_of(edited, vocab, name, relation) == place:
            edited.zero_grad(set_to_none=True)
            return edited, Finetuned(target, step, losses[0], losses[-1])
    raise EditFailed(f"the finetune edit of {name!r} did not take: after {steps} steps the model answers "
                     f"{answer_of(edited, vocab, name, relation)!r}, not {place!r}; nothing written")

