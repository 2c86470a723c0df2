"""Gated fact edits (after GRACE, Hartvigsen et al. 2023): a codebook of key-value entries at one
layer's residual stream, each entry firing only where the stream comes within its radius of its
key.

For every position, the residual stream h after block ``layer`` is compared with the keys; the
nearest key, when h is within that entry's radius (the *deferral radius*), adds the entry's
value to h: h' = h + v. Every other position is passed on bit for bit (``torch.where``), so an
input that never comes near a key is answered exactly as by the model without the codebook.

The codebook is not part of the model's weights: its tensors are buffers that the model's
``state_dict`` leaves out (the model's own tensors, and their checksum, stay those of the
model that was edited), and a checkpoint stores them as the ``edit.*`` tensors of format
``attnlab-checkpoint-2`` (attnlab/checkpoint.py). Each entry belongs to one edit (``owner``, the
edit's number), so undoing an edit removes its entries and nothing else.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from .hooks import hook_point

# The tensors of a codebook in a checkpoint, under "edit.": name -> dtype.
TENSORS = {"keys": torch.float32, "values": torch.float32, "radii": torch.float32, "owner": torch.int64}


class EditCodebook(nn.Module):
    """The entries (keys (N, C), values (N, C), radii (N,), owner (N,)) at ``layer``."""

    def __init__(self, layer: int, width: int):
        super().__init__()
        self.layer = layer
        for name, dtype in TENSORS.items():
            shape = (0, width) if name in ("keys", "values") else (0,)
            self.register_buffer(name, torch.zeros(shape, dtype=dtype), persistent=False)
        self.capture: list[Tensor] | None = None  # when a list, the stream before the edit is appended
        self.enabled = True

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def add(self, keys: Tensor, values: Tensor, radii: Tensor, owner: int) -> None:
        dev = self.keys.device
        self.keys = torch.cat([self.keys, keys.detach().float().to(dev)])
        self.values = torch.cat([self.values, values.detach().float().to(dev)])
        self.radii = torch.cat([self.radii, radii.detach().float().to(dev)])
        self.owner = torch.cat([self.owner, torch.full((len(keys),), owner, dtype=torch.int64, device=dev)])

    def remove(self, owner: int) -> int:
        """Drop the entries of edit ``owner``; how many there were."""
        keep = self.owner != owner
        for name in TENSORS:
            setattr(self, name, getattr(self, name)[keep])
        return int((~keep).sum())

    def tensors(self) -> dict[str, Tensor]:
        return {name: getattr(self, name).detach().cpu().contiguous() for name in TENSORS}

    def load(self, tensors: dict[str, Tensor]) -> None:
        for name in TENSORS:
            setattr(self, name, tensors[name].to(self.keys.device))

    def gate(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """For a stream h (..., C): which entry is nearest (...,) and whether it fires (...,)."""
        flat = h.reshape(-1, h.shape[-1]).double()
        keys = self.keys.double()
        # In double precision, so that the rounding of the product form cannot open or close a
        # gate: a squared distance of order |h|^2 keeps about 13 digits.
        dist = (flat.pow(2).sum(-1, keepdim=True) - 2 * flat @ keys.T + keys.pow(2).sum(-1)).clamp_min(0)
        nearest, index = dist.min(-1)
        fires = nearest <= self.radii[index].double().pow(2)
        return index.reshape(h.shape[:-1]), fires.reshape(h.shape[:-1])

    def apply(self, h: Tensor) -> Tensor:
        """The stream after the codebook: h, with the value of the nearest entry added where
        that entry fires (the patch of the hook point ``blocks.L.resid_post``)."""
        if self.capture is not None:
            self.capture.append(h.detach())
        if not self.enabled or not len(self):
            return h
        index, fires = self.gate(h)
        return torch.where(fires[..., None], h + self.values[index].to(h.dtype), h)


def codebook_of(model) -> EditCodebook | None:
    return model.edit_codebook


def attach(model, layer: int) -> EditCodebook:
    """The model's codebook, attached at ``layer`` (an empty one if it has none)."""
    book = codebook_of(model)
    if book is not None:
        if book.layer != layer:
            raise ValueError(f"this model's gated edits are at layer {book.layer}; a gated edit at layer "
                             f"{layer} cannot join them (use --layer {book.layer})")
        return book
    if not 0 <= layer < model.config.n_layer:
        raise ValueError(f"codebook layer {layer} is out of range: the model has layers 0..{model.config.n_layer - 1}")
    book = EditCodebook(layer, model.config.n_embd).to(model.tok_emb.weight.device)
    model.edit_codebook = book  # a submodule: moved by .to(), copied by deepcopy, not in state_dict
    hook_point(model, f"blocks.{layer}.resid_post").patch(book.apply)
    return book


@contextlib.contextmanager
def captured(model):
    """The residual stream before the codebook at its layer, on every forward pass in the block
    (a list of (B, T, C) tensors)."""
    book = codebook_of(model)
    store: list[Tensor] = []
    book.capture = store
    try:
        yield store
    finally:
        book.capture = None


# ---- in a checkpoint -------------------------------------------------------------------------
def saved_edits(model) -> tuple[dict | None, dict[str, Tensor]]:
    """What a checkpoint of ``model`` stores about its edits: the "edits" metadata (None for a
    model never edited: written as format 1) and the codebook's tensors."""
    records = list(model.edits)
    book = codebook_of(model)
    if not records and book is None:
        return None, {}
    return ({"layer": None if book is None else book.layer, "records": records},
            {} if book is None else book.tensors())


def restore(model, records: list[dict], layer: int | None, tensors: dict[str, Tensor]) -> None:
    """Give a freshly built model the edits a checkpoint holds."""
    model.edits = [dict(r) for r in records]
    if layer is not None:
        attach(model, layer).load(tensors)


def check_edits(header: dict, tensors: dict[str, Tensor], config) -> tuple[list[dict], int | None, dict]:
    """The edits of a format-2 checkpoint (records, codebook layer, codebook tensors), each part
    checked; a ValueError saying what is wrong (checkpoint.py names the file)."""
    edits = header.get("edits")
    if not isinstance(edits, dict) or not isinstance(edits.get("records"), list):
        raise ValueError(f"an edited checkpoint needs an 'edits' object with a 'records' list")
    records, layer = edits["records"], edits.get("layer")
    if not records or not all(isinstance(r, dict) and isinstance(r.get("id"), int) for r in records):
        raise ValueError(f"edits.records must be a non-empty list of objects with an integer 'id'")
    if layer is None:
        if tensors:
            raise ValueError(f"edit tensors {sorted(tensors)[:3]} but no codebook layer in edits")
        return records, None, {}
    if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < config.n_layer:
        raise ValueError(f"edits.layer {layer!r} is not a layer of this model (0..{config.n_layer - 1})")
    _check_codebook_tensors(tensors, config.n_embd, {r["id"] for r in records})
    return records, layer, tensors


def _check_codebook_tensors(tensors: dict[str, Tensor], width: int, ids: set[int]) -> None:
    missing = sorted(set(TENSORS) - set(tensors))
    extra = sorted(set(tensors) - set(TENSORS))
    if missing or extra:
        raise ValueError(f"codebook tensors missing {missing}, unexpected {extra}")
    n = tensors["keys"].shape[0]
    for name, dtype in TENSORS.items():
        t = tensors[name]
        shape = (n, width) if name in ("keys", "values") else (n,)
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"tensor edit.{name} is {t.dtype} {list(t.shape)}, expected {dtype} {list(shape)}")
    unknown = set(tensors["owner"].tolist()) - ids
    if unknown:
        raise ValueError(f"codebook entries belong to edits {sorted(unknown)[:3]} that edits.records does not list")
