"""Restructuring changes no numbers: the tiny preset trains to the recorded weights on CPU.

A model's fingerprint is its weights (all of them, one float64 vector) projected on 8 seeded
random directions (values of order 10). Exact checksums were recorded first, with the code
before the restructuring of issue 16 (commit 848520a), and held through it, but only on that
machine's CPU: another CPU model rounds some kernels differently. So fingerprints are compared
to 3e-4: summing in another order (two threads instead of one) moves them by at most 3e-5,
while a change of the computation as small as a 0.1% higher learning rate moves them by 3e-3.
They were recorded with commit c066b35 (whose exact checksums equalled 848520a's) on an AMD
EPYC, one thread. Each case covers other code: span
corruption with dropout (the cheap masks), the lm objective with packed segments (segment
masks and positions), a variant with an additive bias (relative: its own no-decay parameter),
rotary, the plain path (``fast`` off) and finetuning from a pretrained model.
If a case fails after a change that was meant to change the numbers, record the new fingerprints
with ``python tests/test_unchanged.py`` and say why in the commit.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from attnlab.config.settings import ModelConfig, get_preset
from attnlab.training.pipeline import finetune, pretrain

EXPECTED = {
    "span-vanilla-dropout": [3.015253283, -19.45547133, 12.96762143, 2.730904889, 24.01554547, 1.022382124,
                             8.936769305, 14.00697802],
    # re-recorded for issue 25: --max-steps stops an lm run inside the schedule of all its epochs
    # (it compressed the schedule into the steps before), as it always did for span corruption
    "lm-relative": [-10.97227422, 5.719317484, 17.05746479, -8.725803699, -3.047623153, -0.4075109687, 36.16147395,
                    17.60457243],
    "span-rotary-plain": [2.798286593, -19.79344469, 13.11269777, 1.40722467, 22.8391066, 1.192046259, 10.18611898,
                          12.79097615],
    "finetune-vanilla": [2.202573262, -17.82093961, 12.73642392, 2.769987633, 23.22555672, 3.073982489, 9.945019425,
                         14.17600738],
}


def fingerprint(model: torch.nn.Module) -> list[float]:
    """The weights, in name order as one float64 vector, projected on 8 seeded random directions."""
    weights = torch.cat([t.detach().cpu().double().reshape(-1) for _, t in sorted(model.state_dict().items())])
    directions = torch.randn(8, len(weights), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return (directions @ weights).tolist()


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
    return fingerprint(m)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # sums in the order they were recorded in
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("case", list(EXPECTED))
def test_tiny_preset_trains_to_the_recorded_weights(case, tiny_data, tmp_path, one_thread):
    assert _train(case, tiny_data, tmp_path) == pytest.approx(EXPECTED[case], rel=0, abs=3e-4)


if __name__ == "__main__":  # print the fingerprints of the current code
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
            print(f'    "{case}": {[float(f"{v:.10g}") for v in _train(case, data, tmp)]},')
