"""The character vocabulary (SPEC section 2).

Id 0 is PAD (``□``, U+25A1), id 1 is MASK (``⁇``, U+2047, also the QA sentinel), and ids 2..
are the sorted distinct characters of the pretraining corpus. The corpus always defines the
vocabulary, and checkpoints store it as a plain list (``to_list``/``from_list``) so that
evaluation never needs the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

PAD_CHAR = "\u25a1"  # □, id 0: padding; PAD targets are ignored by the loss
MASK_CHAR = "\u2047"  # ⁇, id 1: span-corruption mask and QA sentinel (also in format_names.py, without torch)
PAD_ID = 0
MASK_ID = 1


class VocabError(ValueError):
    """A character outside the vocabulary, reported as one line ``source:line: ...``.

    SPEC 2 asks for an error naming the file, line and character, never a bare KeyError.
    """

    def __init__(self, char: str, source: str | None = None, line: int | None = None):
        self.char = char
        self.source = source
        self.line = line
        where = source if source is not None else "<input>"
        if line is not None:
            where = f"{where}:{line}"
        # repr() keeps the message on one line even for '\n' or '\t'.
        super().__init__(
            f"{where}: character {char!r} (U+{ord(char):04X}) is not in the vocabulary"
        )

    def __reduce__(self):  # keep the exception picklable (DataLoader workers)
        return (type(self), (self.char, self.source, self.line))


class Vocab:
    """A fixed mapping between single characters and integer ids."""

    def __init__(self, itos: Sequence[str]):
        itos = list(itos)
        if len(itos) < 2 or itos[0] != PAD_CHAR or itos[1] != MASK_CHAR:
            raise ValueError(
                f"a vocabulary must start with PAD {PAD_CHAR!r} (id {PAD_ID}) and "
                f"MASK {MASK_CHAR!r} (id {MASK_ID})"
            )
        for i, ch in enumerate(itos):
            if not isinstance(ch, str) or len(ch) != 1:
                raise ValueError(f"vocabulary entry {i} is {ch!r}, not a single character")
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = {ch: i for i, ch in enumerate(itos)}
        if len(self.stoi) != len(itos):
            seen: set[str] = set()
            dup = next(ch for ch in itos if ch in seen or seen.add(ch))
            raise ValueError(f"vocabulary entry {dup!r} appears more than once")

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        """[PAD, MASK] + the sorted distinct characters of ``text`` (newline included)."""
        chars = set(text)
        for reserved in (PAD_CHAR, MASK_CHAR):
            if reserved in chars:
                raise ValueError(
                    f"the corpus contains the reserved character {reserved!r} "
                    f"(U+{ord(reserved):04X}); it cannot define a vocabulary"
                )
        return cls([PAD_CHAR, MASK_CHAR, *sorted(chars)])

    @classmethod
    def from_list(cls, items: Iterable[str]) -> Vocab:
        """Inverse of ``to_list`` (a vocabulary read back from a checkpoint's JSON)."""
        return cls(list(items))

    def to_list(self) -> list[str]:
        return list(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self.itos == other.itos

    __hash__ = None  # mutable-list backed; equality is by content

    def __repr__(self) -> str:
        return f"Vocab({len(self)} entries)"

    def encode(
        self, s: str, *, source: str | None = None, line: int | None = None
    ) -> list[int]:
        """Ids of the characters of ``s``; VocabError naming ``source``/``line`` if unknown."""
        stoi = self.stoi
        try:
            return [stoi[ch] for ch in s]
        except KeyError:
            bad = next(ch for ch in s if ch not in stoi)
            raise VocabError(bad, source, line) from None

    def encode_tensor(
        self, s: str, *, source: str | None = None, line: int | None = None
    ) -> torch.Tensor:
        """Like ``encode`` but as a 1-D LongTensor."""
        return torch.tensor(self.encode(s, source=source, line=line), dtype=torch.long)

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """The string of a list of ids or a 1-D tensor of ids."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode expects a 1-D tensor, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        itos = self.itos
        out = []
        for i in ids:
            if not 0 <= i < len(itos):
                raise ValueError(f"id {i} is outside the vocabulary (0..{len(itos) - 1})")
            out.append(itos[i])
        return "".join(out)


_VISIBLE = {"\n": "↵", "\t": "⇥"}


def visible(text: str, spaces: bool = False) -> str:
    """``text`` with newlines and tabs (and, if asked, spaces) drawn as visible marks, for
    printed continuations and the axis labels of attention maps."""
    table = {**_VISIBLE, " ": "␣"} if spaces else _VISIBLE
    return "".join(table.get(c, c) for c in text)
