"""A lab model as a TransformerLens model (``attnlab export RUN --to transformer-lens OUT``).

TransformerLens 4 removed ``HookedTransformer``; its successor is the ``TransformerBridge``, and
its TL-native transformer (``TransformerBridge.boot_native``: pre-LayerNorm blocks, a GELU MLP,
biased query/key/value/output projections, learned positions or rotary angles on adjacent
coordinate pairs) is the lab's GPT. The weights map one to one:

| lab (``GPT``) | TransformerLens (``TransformerBridge``) |
| --- | --- |
| ``tok_emb`` (concat positions: padded with zeros) | ``embed`` |
| ``pos_emb`` (learned or the sinusoidal table; zeros for none) | ``pos_embed`` |
| ``blocks.L.ln1/ln2``, ``ln_f`` | ``blocks.L.ln1/ln2``, ``ln_final`` |
| ``blocks.L.attn.query/key/value/proj`` | ``blocks.L.attn.q/k/v/o`` |
| ``blocks.L.mlp.0/2`` | ``blocks.L.mlp.in/out`` |
| ``head`` (times ``logit_scale``) | ``unembed`` (bias zero) |

What has no TransformerLens form is refused (``ExportError``, one line): attention other than
vanilla's and rotary's scores and softmax (synthesizer, relative, merged_qk, argmax, your own),
rotary beside an absolute position table (TransformerLens's rotary models have none), and gated
edits (a codebook that acts on the residual stream outside the weights).

Everything the tool needs is imported inside the functions (the ``interop`` extra).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..config.settings import ModelConfig
from ..core.outputs import refuse_existing, write_output
from ..core.paths import output_dir
from ..data.vocab import MASK_CHAR, PAD_ID, Vocab
from ..model.attention import plugin
from ..model.codebook import codebook_of
from ..model.gpt import GPT

TOLERANCE = 1e-5  # the largest logit difference an export may show on its check texts
FILES = ("config.json", "weights.safetensors", "vocab.json", "load.py", "README.md")
INSTALL = "pip install 'attnlab[interop]' (transformer-lens)"


class ExportError(ValueError):
    """A model that TransformerLens cannot express, or a tool that is not installed: one line."""


class LogitMismatch(ExportError):
    """The exported model's logits differ from the lab's by more than ``TOLERANCE``."""


# ---- what maps -------------------------------------------------------------------------------
def refusal(model: GPT) -> str | None:
    """Why ``model`` has no TransformerLens form, or None when it has one."""
    c = model.config
    if plugin.is_plugin(c.attention):
        return f"your own attention ({c.attention.split('@')[0]}) has no TransformerLens form"
    if c.attention not in ("vanilla", "rotary"):
        return (f"{c.attention} attention has no TransformerLens form (it computes softmax(q.k/sqrt(d)) "
                "attention only: vanilla, or rotary)")
    if c.attention == "rotary" and c.positions != "none":
        return (f"rotary attention beside a {c.positions} position table has no TransformerLens form (its "
                "rotary models add no position table); a run with --positions none exports")
    book = codebook_of(model)
    if book is not None and len(book):
        return f"the model holds {len(book)} gated-edit entries, which act outside its weights"
    return None


def tl_config(config: ModelConfig) -> dict[str, Any]:
    """The ``TransformerBridgeConfig`` (as a dict) of the TL-native model that is ``config``'s GPT."""
    rotary = config.attention == "rotary"
    return {
        "model_name": "attnlab", "d_model": config.n_embd, "d_head": config.head_dim, "n_layers": config.n_layer,
        "n_heads": config.n_head, "n_ctx": config.block_size, "d_vocab": config.vocab_size,
        "d_mlp": 4 * config.n_embd, "act_fn": "gelu", "normalization_type": "LN", "eps": 1e-5,
        "positional_embedding_type": "rotary" if rotary else "standard",
        **({"rotary_dim": config.head_dim, "rotary_base": 10_000} if rotary else {}),
        "attention_dir": "causal" if config.causal else "bidirectional",
        # The weights come from the lab: no initialisation, no beginning-of-sequence token
        # (the lab's texts start with their first character).
        "init_weights": False, "tokenizer_prepends_bos": False,
    }


def tl_weights(model: GPT) -> dict[str, Tensor]:
    """The lab model's weights under the bridge's names (the table in the module docstring)."""
    c = model.config
    tok = model.tok_emb.weight.detach()
    embed, pos = tok, _positions(model)
    if c.position_mode == "concat":  # [tok, pos] = [tok, 0] + [0, pos]
        embed = torch.cat([tok, tok.new_zeros(tok.shape[0], c.pos_width)], dim=1)
        pos = torch.cat([pos.new_zeros(pos.shape[0], c.n_embd - c.pos_width), pos], dim=1)
    out = {"embed.weight": embed, "ln_final.weight": model.ln_f.weight, "ln_final.bias": model.ln_f.bias,
           "unembed.weight": model.head.weight * c.logit_scale,
           "unembed.bias": model.head.weight.new_zeros(c.vocab_size)}
    if c.attention != "rotary":
        out["pos_embed.weight"] = pos
    parts = {"ln1": "ln1", "ln2": "ln2", "attn.q": "attn.query", "attn.k": "attn.key", "attn.v": "attn.value",
             "attn.o": "attn.proj", "mlp.in": "mlp.0", "mlp.out": "mlp.2"}
    lab = model.state_dict()
    for i in range(c.n_layer):
        for theirs, ours in parts.items():
            for kind in ("weight", "bias"):
                out[f"blocks.{i}.{theirs}.{kind}"] = lab[f"blocks.{i}.{ours}.{kind}"]
    return {k: v.detach().float().cpu().contiguous().clone() for k, v in out.items()}


def _positions(model: GPT) -> Tensor:
    """The absolute position table added to the token embeddings: zeros when there is none."""
    if model.pos_emb is None:
        return torch.zeros(model.config.block_size, model.config.n_embd)
    return model.pos_emb.detach()


# ---- the TransformerLens model ---------------------------------------------------------------
def boot(config: dict[str, Any], weights: dict[str, Tensor], device: str | torch.device = "cpu",
         dtype: torch.dtype = torch.float32):
    """The ``TransformerBridge`` of ``config`` holding ``weights`` (every one of its tensors), in
    eval mode; the caller's random state is left as it was (the bridge draws initial weights
    that ``weights`` then replace)."""
    try:
        from transformer_lens.model_bridge import TransformerBridge
        import transformer_lens.model_bridge.sources.native  # noqa: F401  (adds boot_native)
    except ImportError as e:
        raise ExportError(f"TransformerLens is not installed ({e}); {INSTALL}") from None
    with torch.random.fork_rng(devices=[]):
        bridge = TransformerBridge.boot_native(dict(config), device=device, dtype=dtype)
    missing, unexpected = bridge.load_state_dict(weights, strict=False)
    left = [k for k in bridge.state_dict() if k not in weights]
    if left or unexpected:
        raise ExportError(f"the TransformerLens model's weights do not match: missing {left}, unexpected {unexpected}")
    return bridge.eval()


def to_transformer_lens(model: GPT, device: str | torch.device | None = None):
    """``model`` as a TransformerLens ``TransformerBridge`` (an ExportError when it has no such form)."""
    why = refusal(model)
    if why:
        raise ExportError(why)
    device = device or next(model.parameters()).device
    return boot(tl_config(model.config), tl_weights(model), device)


# ---- the check -------------------------------------------------------------------------------
def check_texts(model: GPT, vocab: Vocab, questions: list, corpus_lines: list[str] | None = None) -> list[str]:
    """The texts the model reads for ``questions`` (QAExamples with answers), in its own answer
    format and teacher forced: ``question⁇place⁇`` (direct), or the person's recalled line,
    ``⁇``, the place and ``⁇`` (recall; the opening ``NAME.`` alone for a person with no line in
    ``corpus_lines``), cut to the block."""
    from ..answering.formats import answer_format
    from ..data.corpus import CorpusIndex
    from ..data.datasets import DataError
    from ..data.relations import Schema

    fmt = answer_format(model.config.qa_format)
    index = CorpusIndex(corpus_lines) if corpus_lines is not None and fmt.recalls else None
    schema = Schema.from_list(model.config.relations)
    texts = []
    for ex in questions:
        try:
            text, _ = fmt.example_text(ex, model.config.recall_chars, index, schema=schema,
                                       quote=model.config.quote)
        except DataError:  # a recall model asked about a person with no line
            text = schema.require(ex).subject + "." if fmt.recalls else ex.question + MASK_CHAR
        texts.append(text[: model.config.block_size])
    return texts


@torch.no_grad()
def logit_difference(model: GPT, bridge, vocab: Vocab, texts: list[str], batch_size: int = 64) -> tuple[float, int]:
    """The largest |logit difference| between ``model`` and ``bridge`` at every position of
    every text, and how many positions were compared. Rows are padded on the right: a causal
    model's earlier positions never see the padding, and it is left out of the comparison."""
    model.eval()
    device = next(model.parameters()).device
    worst, count = 0.0, 0
    for i in range(0, len(texts), batch_size):
        rows = [vocab.encode(t) for t in texts[i:i + batch_size]]
        ids = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long, device=device)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
        if not model.config.causal:  # no padding: each text alone
            pairs = [(model.run(ids[r:r + 1, : len(row)])[0], bridge(ids[r:r + 1, : len(row)])) for r, row in enumerate(rows)]
        else:
            ours, theirs = model.run(ids)[0], bridge(ids)
            pairs = [(ours[r:r + 1, : len(row)], theirs[r:r + 1, : len(row)]) for r, row in enumerate(rows)]
        for a, b in pairs:
            worst = max(worst, float((a.float() - b.float()).abs().max()))
            count += a.shape[1]
    return worst, count


def compare(model: GPT, vocab: Vocab, config: dict[str, Any], weights: dict[str, Tensor], texts: list[str]
            ) -> tuple[float, float, int]:
    """The largest logit difference between ``model`` and its TransformerLens copy on ``texts``
    in float64 (both copied to it: what the mapping itself gets wrong) and in float32 (that
    plus rounding: the lab's own fused and plain paths differ by as much), and the positions
    compared."""
    device = next(model.parameters()).device
    lab64 = copy.deepcopy(model).double()
    ours64 = boot(config, {k: v.double() for k, v in weights.items()}, device, torch.float64)
    exact, positions = logit_difference(lab64, ours64, vocab, texts)
    rounded, _ = logit_difference(model, boot(config, weights, device), vocab, texts)
    return exact, rounded, positions


# ---- the folder ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exported:
    """An export: its folder, the largest logit difference on the check texts and their count."""

    out: Path
    difference: float  # in float64: the mapping's own error
    float32_difference: float  # in float32: that and the rounding of two ways of computing the same sums
    texts: int
    positions: int
    check_file: str

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "files": list(FILES), "max_logit_difference": self.difference,
                "max_logit_difference_float32": self.float32_difference,
                "tolerance": TOLERANCE, "texts": self.texts, "positions": self.positions,
                "check_file": self.check_file}


def export(model: GPT, vocab: Vocab, out: str | Path, texts: list[str], *, source: str, check_file: str,
           overwrite: bool = False) -> Exported:
    """Write ``model`` as a TransformerLens model into the folder ``out`` (``FILES``), after
    checking that its logits equal the lab's to ``TOLERANCE`` at every position of ``texts``
    (an ExportError, nothing written, when they do not). Existing files are refused unless
    ``overwrite``; each file is written whole (atomically)."""
    out = output_dir(out, "the export folder")
    refuse_existing([out / f for f in FILES], overwrite)
    why = refusal(model)
    if why:
        raise ExportError(why)
    config, weights = tl_config(model.config), tl_weights(model)
    exact, rounded, positions = compare(model, vocab, config, weights, texts)
    if not exact <= TOLERANCE:
        raise LogitMismatch(f"the TransformerLens model's logits differ from the lab's by {exact:.3g} in float64 "
                            f"(more than {TOLERANCE:g}) on {check_file}; nothing written")
    from safetensors.torch import save

    done = Exported(out, exact, rounded, len(texts), positions, check_file)
    files = {"config.json": json.dumps(config, indent=2) + "\n", "weights.safetensors": save(weights),
             "vocab.json": json.dumps(vocab.to_list(), ensure_ascii=False) + "\n",
             "load.py": LOADER, "README.md": _readme(done, source, model.config)}
    for name, data in files.items():
        write_output(out / name, data, overwrite)
    return done


def _readme(done: Exported, source: str, config: ModelConfig) -> str:
    return README.format(source=source, attention=config.attention, positions=config.positions,
                         qa=config.qa_format, difference=done.difference, rounded=done.float32_difference, texts=done.texts,
                         positions_n=done.positions, check_file=done.check_file, tolerance=TOLERANCE)


README = """# A lab model for TransformerLens

Exported by `attnlab export {source} --to transformer-lens` ({attention} attention, {positions}
positions, {qa} answers). Its logits equal the lab's to within {difference:.2g} in float64 (at
most {tolerance:g} allowed) at all {positions_n} positions of {texts} texts of {check_file}, in
the model's own answer format; in float32, to within {rounded:.2g} (rounding: the two models
add the same numbers in different orders).

| file | what |
| --- | --- |
| `config.json` | the `TransformerBridgeConfig` of TransformerLens's native transformer |
| `weights.safetensors` | the weights, under the bridge's names (`blocks.0.attn.q.weight`, ...) |
| `vocab.json` | the characters, by id (0 is padding, 1 is the question mark `⁇`) |
| `load.py` | `load()`: the `TransformerBridge`; `encode(text)`, `decode(ids)`: characters and ids |

```python
import sys; sys.path.insert(0, "THIS_FOLDER")
from load import load, encode
model = load()   # this folder's model; needs transformer-lens==4.3.0 and safetensors, not attnlab
logits, cache = model.run_with_cache(encode("Where was Alfred Mele born?\u2047"))
```

The model reads character ids (no tokenizer, no beginning-of-sequence token). See the lab's
docs, "Other tools", for what maps and what does not.
"""

LOADER = '''"""Load this folder as a TransformerLens model: a TransformerBridge over TransformerLens's
native transformer (HookedTransformer was removed in TransformerLens 4.0). Needs
transformer-lens (4.3.0) and safetensors; not attnlab."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent


def load(folder=HERE, device="cpu"):
    """The TransformerBridge of ``folder`` (config.json, weights.safetensors), in eval mode."""
    from transformer_lens.model_bridge import TransformerBridge
    import transformer_lens.model_bridge.sources.native  # noqa: F401  (adds boot_native)

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(folder / "weights.safetensors")
    with torch.random.fork_rng(devices=[]):  # its initial weights are replaced: keep the caller's random state
        model = TransformerBridge.boot_native(config, device=device)
    _, unexpected = model.load_state_dict(weights, strict=False)
    left = [k for k in model.state_dict() if k not in weights]
    if left or unexpected:
        raise ValueError(f"{folder}: weights do not match the config: missing {left}, unexpected {unexpected}")
    return model.eval()


def characters(folder=HERE):
    """The vocabulary: the character of each id."""
    return json.loads((Path(folder) / "vocab.json").read_text(encoding="utf-8"))


def encode(text, folder=HERE):
    """``text`` as a (1, T) tensor of character ids (a ValueError naming an unknown character)."""
    ids = {c: i for i, c in enumerate(characters(folder))}
    missing = sorted(set(text) - set(ids))
    if missing:
        raise ValueError(f"characters not in the vocabulary: {missing}")
    return torch.tensor([[ids[c] for c in text]])


def decode(ids, folder=HERE):
    """The text of a sequence of character ids."""
    chars = characters(folder)
    return "".join(chars[int(i)] for i in ids)
'''
