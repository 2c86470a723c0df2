"""Your own attention by path (issue 48, item 1): FILE.py:ClassName in the lab's interface and the
course's, pinned by content hash, copied into the run, refused when changed; every bad plug-in
is one line naming the user's file (and line)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from attnlab import cli
from attnlab.config.settings import ModelConfig
from attnlab.data.vocab import MASK_CHAR, PAD_CHAR, Vocab
from attnlab.experiments.compare import _check_variants
from attnlab.model.attention import plugin
from attnlab.model.checkpoint import CheckpointError, load_checkpoint, load_model, save_checkpoint
from attnlab.model.generate import generate
from attnlab.model.gpt import GPT

FIXTURES = Path(__file__).parent / "fixtures" / "attention"
COURSE = f"{FIXTURES / 'course_attention.py'}:CausalSelfAttention"
LAB = f"{FIXTURES / 'lab_attention.py'}:SharpAttention"


def tiny(attention: str) -> ModelConfig:
    return ModelConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                       attention=attention)


@pytest.mark.parametrize("name", [COURSE, LAB], ids=["course", "lab"])
def test_a_plugin_model_is_pinned_and_decodes_as_without_the_cache(name: str) -> None:
    torch.manual_seed(0)
    model = GPT(tiny(name)).eval()
    assert model.config.attention.startswith(str(FIXTURES)) and plugin.PIN in model.config.attention
    prompts = [[3, 4, 5], [6, 7, 8, 9, 10, 11]]
    cached = generate(model, prompts, 6).tokens
    assert cached == generate(model, prompts, 6, use_cache=False).tokens
    assert cached[0] == generate(model, prompts[:1], 6).tokens[0]  # left padding changes nothing
    # A long prompt beside a short one: the batch decodes past the block in the finished row.
    uneven = [list(range(2, 16)), [3, 4]]
    assert generate(model, uneven, 12).tokens[1] == generate(model, uneven[1:], 12).tokens[0]
    # A draft (the recall's guesses from the corpus) never changes the tokens: a lab-interface
    # layer checks the guesses, a course module (which cannot hide a rejected guess) ignores them.
    guesses = lambda row, ids: [2, 2, 2]  # noqa: E731
    assert generate(model, prompts, 6, draft=guesses).tokens == cached


def test_a_course_module_is_wrapped_and_its_dropout_names_answer() -> None:
    cls = plugin.plugin_class(COURSE)
    assert issubclass(cls, plugin.CourseAttention)
    layer = cls(tiny(COURSE))
    assert sum(p.numel() for p in layer.parameters()) == 4 * (16 * 16 + 16)
    with pytest.raises(plugin.PluginError, match="weights"):
        layer(torch.randn(1, 4, 16), torch.arange(4)[None], need_weights=True)


def test_a_run_keeps_the_source_and_refuses_a_changed_file(tmp_path: Path) -> None:
    mine = tmp_path / "mine.py"
    shutil.copy(FIXTURES / "lab_attention.py", mine)
    vocab = Vocab.from_list([PAD_CHAR, MASK_CHAR] + [chr(97 + i) for i in range(26)] + [" ", "\n"])
    model = GPT(tiny(f"{mine}:SharpAttention"))
    save_checkpoint(tmp_path / "run" / "checkpoint.safetensors", model, vocab)
    assert (tmp_path / "run" / "attention" / "mine.py").read_bytes() == mine.read_bytes()
    load_model(tmp_path / "run")  # the same file: loads
    mine.write_text(mine.read_text() + "\n# edited\n")
    with pytest.raises(CheckpointError, match="changed since the model was made"):
        load_checkpoint(tmp_path / "run")
    mine.unlink()
    with pytest.raises(CheckpointError, match="no such file.*keeps a copy in RUN/attention/mine.py"):
        load_checkpoint(tmp_path / "run")


def _problem(tmp_path: Path, source: str, cls: str = "A") -> str:
    path = tmp_path / "user.py"
    path.write_text(source)
    with pytest.raises(plugin.PluginError) as e:
        GPT(tiny(f"{path}:{cls}"))
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


def test_bad_plugins_are_one_line_naming_the_users_file(tmp_path: Path) -> None:
    assert ":3: ZeroDivisionError while importing" in _problem(tmp_path, "import torch\n\nx = 1 / 0\n")
    assert ":1: SyntaxError" in _problem(tmp_path, "def f(:\n")
    assert "no class 'B' (classes there: A)" in _problem(tmp_path, "class A:\n    pass\n", "B")
    assert "not a torch.nn.Module class" in _problem(tmp_path, "class A:\n    pass\n")
    assert "forward(x)" in _problem(tmp_path, "from torch import nn\nclass A(nn.Module):\n"
                                    "    def __init__(self, c):\n        super().__init__()\n"
                                    "    def forward(self, x, mask):\n        return x\n")
    assert ":4: ValueError while building A(config)" in _problem(
        tmp_path, "from torch import nn\nclass A(nn.Module):\n    def __init__(self, c):\n"
                  "        raise ValueError('no')\n    def forward(self, x):\n        return x\n")
    assert "defines no forward(x)" in _problem(tmp_path, "from torch import nn\nclass A(nn.Module):\n    pass\n")
    assert "defines no queries_keys" in _problem(
        tmp_path, "from attnlab.model.attention import Attention\nclass A(Attention):\n    pass\n")
    with pytest.raises(plugin.PluginError, match="no such file"):
        GPT(tiny(f"{tmp_path / 'absent.py'}:A"))


def test_a_module_path_names_a_class_too() -> None:
    cls = plugin.plugin_class("tests.fixtures.attention.lab_attention:SharpAttention")
    assert cls.__name__ == "SharpAttention" and cls.queries_keys is not None
    model = GPT(tiny("tests.fixtures.attention.lab_attention:SharpAttention"))
    assert model.config.attention.startswith("tests.fixtures.attention.lab_attention:SharpAttention@sha256:")


def test_the_flag_takes_a_path_form_and_refuses_a_bad_name(capsys) -> None:
    parser = cli.build_parser()
    for good in ("rotary", "rotary+argmax", COURSE, "package.module:Cls"):
        assert parser.parse_args(["pretrain", "--attention", good]).attention == good
    for command in ("finetune", "demo"):
        assert parser.parse_args([command, "--attention", COURSE]).attention == COURSE
    assert parser.parse_args(["compare", "--variants", f"vanilla,{COURSE}"]).variants == f"vanilla,{COURSE}"
    for bad in ("rotry", "x.py:1A"):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(["pretrain", "--attention", bad])
        assert e.value.code == 2 and "FILE.py:ClassName" in capsys.readouterr().err


def test_compare_takes_a_plugin_and_refuses_a_bad_one(tmp_path: Path) -> None:
    assert _check_variants(["vanilla", plugin.pinned(LAB)], None, 1) == "vanilla"
    assert plugin.label(plugin.pinned(LAB)) == "lab_attention.py:SharpAttention"
    with pytest.raises(plugin.PluginError):
        _check_variants(["vanilla", f"{tmp_path / 'absent.py'}:A"], None, 1)
