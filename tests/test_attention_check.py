"""`attnlab check-attention` (issue 48, items 2 and 3): a student's common mistakes are each
caught by the check that names them; correct layers, the lab's variants and the examples pass;
exit codes 0 / 1 / 2 and --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab import cli
from attnlab.probing.attention_check import check_attention

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "attention"
COURSE = f"{FIXTURES / 'course_attention.py'}:CausalSelfAttention"

# (file, class, --same-as, the check that must fail)
MISTAKES = [
    ("mask_after_softmax.py", "CausalSelfAttention", None, "causality"),
    ("mask_off_by_one.py", "CausalSelfAttention", None, "causality"),
    ("no_scaling.py", "CausalSelfAttention", "vanilla", "same as vanilla"),
    ("fused_qkv.py", "UnscaledAttention", "vanilla", "same as vanilla"),
    ("heads_mixed.py", "CausalSelfAttention", None, "causality"),
    ("rotary_on_values.py", "RotaryAttention", "rotary", "same as rotary"),
    ("dropout_at_inference.py", "CausalSelfAttention", None, "no dropout in eval"),
    ("dropout_on_scores.py", "CausalSelfAttention", None, "dropout in training"),
]


def status(report, name: str) -> str:
    return next(c.status for c in report.checks if c.name == name)


@pytest.mark.parametrize("file, cls, same_as, caught_by", MISTAKES, ids=[m[0][:-3] for m in MISTAKES])
def test_a_student_mistake_is_caught(file: str, cls: str, same_as: str | None, caught_by: str) -> None:
    report = check_attention(f"{FIXTURES / file}:{cls}", same_as=same_as)
    assert not report.passed
    failed = next(c for c in report.checks if c.name == caught_by)
    assert failed.status == "fail" and failed.reason and failed.example.startswith("T=2")


# (file, class, --same-as, words of the slip the comparison names)
SLIPS = [
    ("no_scaling.py", "CausalSelfAttention", "vanilla", "scores not scaled by 1/sqrt(d/h)"),
    ("fused_qkv.py", "UnscaledAttention", "vanilla", "scores not scaled by 1/sqrt(d/h)"),
    ("slips.py", "WidthScaled", "vanilla", "1/sqrt(n_embd), the model's width"),
    ("slips.py", "OneHead", "vanilla", "never split into heads"),
    ("slips.py", "KeysQueriesSwapped", "vanilla", "k @ q^T"),
    ("rotary_on_values.py", "RotaryAttention", "rotary", "the rotation applied to the values too"),
    ("slips.py", "RotaryHalves", "rotary", "rotate_half"),
    ("slips.py", "RotaryFrequencies", "rotary", "10000^(-i/e)"),
    ("slips.py", "RotaryQueriesOnly", "rotary", "the queries only, not the keys"),
    ("slips.py", "RotaryReversed", "rotary", "-angle"),
    ("slips.py", "SynthesizerWithoutRelu", "synthesizer", "no ReLU"),
    ("slips.py", "SynthesizerWithoutB2", "synthesizer", "no b_2"),
]


@pytest.mark.parametrize("file, cls, same_as, slip", SLIPS, ids=[f"{m[0][:-3]}-{m[1]}" for m in SLIPS])
def test_the_comparison_names_the_slip_that_gives_the_output(file: str, cls: str, same_as: str, slip: str) -> None:
    """Each slip is made in the lab's variant with the same weights: the one that reproduces the
    layer's output at every length is named; no other slip is."""
    check = next(c for c in check_attention(f"{FIXTURES / file}:{cls}", same_as=same_as).checks
                 if c.name == f"same as {same_as}")
    assert check.status == "fail" and f"it equals {same_as} with" in check.reason
    assert slip in check.reason
    assert "missing scale, wrong mask or head split?" not in check.reason


def test_an_unnamed_difference_says_what_to_look_for(tmp_path: Path) -> None:
    """A difference no listed slip explains (here the values scaled by two) keeps the general hint."""
    path = tmp_path / "doubled.py"
    path.write_text((FIXTURES / "slips.py").read_text() + "\n\nclass Doubled(CausalSelfAttention):\n"
                    "    def forward(self, x):\n        return 2 * super().forward(x)\n")
    check = next(c for c in check_attention(f"{path}:Doubled", same_as="vanilla").checks
                 if c.name == "same as vanilla")
    assert check.status == "fail" and "missing scale, wrong mask or head split?" in check.reason


@pytest.mark.parametrize("file, kind", [("mask_off_by_one.py", "off by one"),
                                        ("mask_after_softmax.py", "every position sees every later one"),
                                        ("heads_mixed.py", "an irregular leak")])
def test_a_leak_is_described_by_its_pattern(file: str, kind: str) -> None:
    check = next(c for c in check_attention(f"{FIXTURES / file}:CausalSelfAttention").checks
                 if c.name == "causality")
    assert check.status == "fail" and kind in check.reason


def test_a_mask_never_cut_to_the_input_is_named() -> None:
    check = next(c for c in check_attention(f"{FIXTURES / 'slips.py'}:MaskNotCut").checks
                 if c.name == "shape and dtype")
    assert check.status == "fail" and "slips.py:" in check.reason
    assert "it runs with T=16, the block size, only" in check.reason


def test_dropout_in_training_passes_a_layer_without_dropout_and_says_so() -> None:
    """Dropout is the student's choice: a layer with none passes the training check, which says
    nothing was dropped; the course's layer (nn.Dropout after the softmax) passes and drops."""
    without = check_attention(f"{FIXTURES / 'slips.py'}:CausalSelfAttention")
    check = next(c for c in without.checks if c.name == "dropout in training")
    assert check.status == "pass" and "nothing is dropped" in check.reason
    check = next(c for c in check_attention(COURSE).checks if c.name == "dropout in training")
    assert check.status == "pass" and "and it drops" in check.reason


def test_a_mask_applied_in_eval_only_leaks_in_training(tmp_path: Path) -> None:
    path = tmp_path / "eval_mask.py"
    source = (FIXTURES / "course_attention.py").read_text()
    masked = '        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))\n'
    assert masked in source
    path.write_text(source.replace(masked, "        if not self.training:\n    " + masked))
    report = check_attention(f"{path}:CausalSelfAttention")
    assert status(report, "causality") == "pass"  # run in eval(): masked
    check = next(c for c in report.checks if c.name == "dropout in training")
    assert check.status == "fail" and "a mask applied in eval() only?" in check.reason
    assert check.example.startswith("T=2")


def test_weights_under_other_names_are_copied_by_role() -> None:
    """nanoGPT's fused c_attn and c_proj: vanilla's query, key and value stacked into c_attn, its
    proj into c_proj; the check says so."""
    same = next(c for c in check_attention(f"{FIXTURES / 'fused_qkv.py'}:CausalSelfAttention",
                                           same_as="vanilla").checks if c.name == "same as vanilla")
    assert same.status == "pass" and "by role (c_attn <- query+key+value, c_proj <- proj" in same.reason
    wrong = next(c for c in check_attention(f"{FIXTURES / 'fused_qkv.py'}:UnscaledAttention",
                                            same_as="vanilla").checks if c.name == "same as vanilla")
    assert wrong.status == "fail" and "copied by role" in wrong.reason


def test_the_mistakes_a_plain_check_cannot_see_pass_it() -> None:
    """Missing scaling is causal and well-formed: only the comparison with vanilla shows it."""
    report = check_attention(f"{FIXTURES / 'no_scaling.py'}:CausalSelfAttention")
    assert report.passed


@pytest.mark.parametrize("name, same_as", [
    (COURSE, "vanilla"), (f"{FIXTURES / 'fused_qkv.py'}:CausalSelfAttention", "vanilla"),
    (f"{FIXTURES / 'nanogpt.py'}:CausalSelfAttention", "vanilla"),
    (f"{FIXTURES / 'slips.py'}:CausalSelfAttention", "vanilla"), (f"{FIXTURES / 'slips.py'}:Rotary", "rotary"),
    (f"{FIXTURES / 'slips.py'}:RotaryConcatenated", "rotary"),
    (f"{FIXTURES / 'slips.py'}:Synthesizer", "synthesizer"),
    (f"{FIXTURES / 'lab_attention.py'}:SharpAttention", None),
    ("vanilla", "vanilla"), ("relative", None), ("merged_qk", None)])
def test_correct_layers_pass(name: str, same_as: str | None) -> None:
    report = check_attention(name, same_as=same_as)
    assert report.passed, report.text()
    expected = "skip" if report.interface == "course" else "pass"
    assert status(report, "KV-cache decode") == expected


@pytest.mark.parametrize("file, cls, variant", [("rotary.py", "RotaryAttention", "rotary"),
                                                ("synthesizer.py", "SynthesizerAttention", "synthesizer")])
def test_the_examples_pass_and_equal_the_lab_variant(file: str, cls: str, variant: str) -> None:
    report = check_attention(f"{ROOT / 'examples' / 'attention' / file}:{cls}", same_as=variant)
    assert report.passed, report.text()
    assert report.interface == "course"


def test_an_error_in_the_users_forward_is_a_failure_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("from torch import nn\n\nclass A(nn.Module):\n    def __init__(self, c):\n"
                    "        super().__init__()\n        self.l = nn.Linear(c.n_embd, c.n_embd)\n\n"
                    "    def forward(self, x):\n        return self.l(x)[:, :, :3]\n")
    report = check_attention(f"{path}:A")
    shape = next(c for c in report.checks if c.name == "shape and dtype")
    assert shape.status == "fail" and "(2, 8, 3)" in shape.reason


def test_the_command_exits_0_1_2_and_prints_json(capsys) -> None:
    assert cli.main(["check-attention", COURSE, "--same-as", "vanilla"]) == 0
    assert "every check passed" in capsys.readouterr().out
    assert cli.main(["check-attention", f"{FIXTURES / 'mask_off_by_one.py'}:CausalSelfAttention", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["passed"] is False
    assert {c["name"]: c["status"] for c in document["checks"]}["causality"] == "fail"
    assert cli.main(["check-attention", f"{FIXTURES / 'absent.py'}:A"]) == 2
    assert "absent.py: no such file" in capsys.readouterr().err
