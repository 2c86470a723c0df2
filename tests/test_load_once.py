"""Loading a model builds it once and makes no random weights that the checkpoint's would
overwrite (issue 45, item 5): the model is laid out on the meta device and given its tensors;
its outputs are the saved model's, bit for bit."""

from __future__ import annotations

import pytest
import torch

from attnlab.config.settings import ModelConfig
from attnlab.data.vocab import Vocab
from attnlab.model import checkpoint
from attnlab.model.gpt import GPT


@pytest.mark.parametrize("attention,positions", [("vanilla", "learned"), ("rotary", "sinusoidal"),
                                                 ("relative", "none"), ("synthesizer", "learned")])
def test_a_load_initialises_no_weights_and_answers_as_saved(tmp_path, monkeypatch, attention, positions):
    vocab = Vocab.from_text("Ada Brook was born in Paris. Where?")
    config = ModelConfig(vocab_size=len(vocab), block_size=24, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                         attention=attention, positions=positions)
    torch.manual_seed(0)
    saved = GPT(config).eval()
    path = checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", saved, vocab)

    built, initialised = [], []
    init, weights = GPT.__init__, GPT._init_weights

    def counted_init(self, *args, **kw):
        init(self, *args, **kw)
        built.append(self.head.weight.device.type)

    def counted_weights(module):
        if any(not p.is_meta for p in module.parameters(recurse=False)):
            initialised.append(type(module).__name__)
        weights(module)

    monkeypatch.setattr(GPT, "__init__", counted_init)
    monkeypatch.setattr(GPT, "_init_weights", staticmethod(counted_weights))
    model, _, _ = checkpoint.load_model(path)
    assert initialised == []  # no random weight made on real memory
    assert built.count("cpu") == 0 and len(built) <= 2  # a meta layout to check the file, one to fill
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    x = torch.tensor([vocab.encode("Ada Brook was born in")])
    with torch.no_grad():
        assert torch.equal(model.run(x)[0], saved.run(x)[0])
    for (name, a), b in zip(saved.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    for a, b in zip(saved.buffers(), model.buffers()):
        assert torch.equal(a, b)


def test_the_loaded_weights_are_a_copy_of_the_checkpoints(tmp_path):
    vocab = Vocab.from_text("abc")
    saved = GPT(ModelConfig(vocab_size=len(vocab), block_size=8, n_layer=1, n_head=1, n_embd=8))
    ckpt = checkpoint.load_checkpoint(checkpoint.save_checkpoint(tmp_path / "c.safetensors", saved, vocab))
    model = ckpt.build_model()
    with torch.no_grad():
        model.head.weight.add_(1.0)
    assert torch.equal(ckpt.model_state["head.weight"], saved.head.weight)
