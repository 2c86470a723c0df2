"""Restructuring changes no numbers: the tiny preset trains to bit-identical weights on CPU.

The expected checksums were recorded with the code before the restructuring of issue 16
(commit 848520a), one thread, on this project's CPU. Each case covers other code: span
corruption with dropout (the cheap masks), the lm objective with packed segments (segment
masks and positions), a variant with an additive bias (relative: its own no-decay parameter),
rotary, the plain path (``fast`` off) and finetuning from a pretrained model.
If a case fails after a change that was meant to change the numbers, record the new checksum
with ``python tests/test_unchanged.py`` and say why in the commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys

import pytest
import torch

from attnlab.config import ModelConfig, get_preset
from attnlab.pipeline import finetune, pretrain

EXPECTED = {
    "span-vanilla-dropout": "cb2ca6b837dce5d9",
    "lm-relative": "535532e7dfee3ec9",
    "span-rotary-plain": "e10fcb8696d0dffe",
    "finetune-vanilla": "6293907de6a81aeb",
}


def checksum(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _train(case: str, data: dict, out) -> str:
    preset = get_preset("tiny")
    model = ModelConfig(**preset.model)
    quiet = dict(log=lambda _m: None)
    steps = dict(max_steps=6, epochs=3, batch_size=4, log_every=1, warmup_tokens=100)
    if case == "span-vanilla-dropout":
        m, _, _ = pretrain(dataclasses.replace(model, dropout=0.1),
                           dataclasses.replace(preset.pretrain, **steps, length_buckets=2),
                           corpus=data["corpus"], run_dir=out / case, mix_qa=None, held_out=(), **quiet)
    elif case == "lm-relative":
        m, _, _ = pretrain(dataclasses.replace(model, attention="relative", dropout=0.1),
                           dataclasses.replace(preset.pretrain, **steps, objective="lm", mix_ratio=0.5,
                                               mix_overlap="drop"),
                           corpus=data["corpus"], run_dir=out / case, mix_qa=data["train"],
                           held_out=(), **quiet)
    elif case == "span-rotary-plain":
        m, _, _ = pretrain(dataclasses.replace(model, attention="rotary", dropout=0.1),
                           dataclasses.replace(preset.pretrain, **steps, fast=False),
                           corpus=data["corpus"], run_dir=out / case, mix_qa=None, held_out=(), **quiet)
    else:
        pretrain(model, dataclasses.replace(preset.pretrain, **steps), corpus=data["corpus"],
                 run_dir=out / "pre", mix_qa=None, held_out=(), **quiet)
        m, _, _ = finetune(dataclasses.replace(preset.finetune, **steps), run_dir=out / case,
                           init=out / "pre", corpus=data["corpus"], train_file=data["train"],
                           overrides={"dropout": 0.1}, **quiet)
    return checksum(m)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # sums in a fixed order: the checksums hold on any core count
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("case", list(EXPECTED))
def test_tiny_preset_trains_to_the_recorded_weights(case, tiny_data, tmp_path, one_thread):
    assert _train(case, tiny_data, tmp_path) == EXPECTED[case]


if __name__ == "__main__":  # print the checksums of the current code
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.conftest import PEOPLE

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lines = [f"{n}. {n} was born in {p} and lived there." for n, p in PEOPLE]
        (tmp / "wiki.txt").write_text("\n".join(lines + ["Where was everyone born? We know."]))
        (tmp / "train.tsv").write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE))
        (tmp / "test.tsv").write_text("".join(f"Where was {n} born?\n" for n, _ in PEOPLE))
        data = {"corpus": tmp / "wiki.txt", "train": tmp / "train.tsv", "test": tmp / "test.tsv"}
        for case in EXPECTED:
            print(f'    "{case}": "{_train(case, data, tmp)}",')
