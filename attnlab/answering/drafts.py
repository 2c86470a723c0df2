"""Guesses of what a recall model will write, looked up in the corpus it was trained on, for
decoding several characters a step (model/generate.py ``_drafted``: speculative decoding whose
draft costs a string search, like prompt-lookup decoding, with the training corpus as the
prompt).

A recall model writes a subject's document back from its opening ``NAME.``; where it stored the
document, the corpus holds the next characters verbatim. The guess never decides an answer:
the model checks every guessed character against its own greedy choice and keeps it only where
the two agree, so the recalled text is the model's own (the same as decoding one character a
step), and a guess that is wrong costs one step, as plain decoding does.
"""

from __future__ import annotations

from ..data.vocab import MASK_CHAR, Vocab

CONTEXTS = (32, 16, 8)  # characters of the text so far looked up, longest first: the first found wins
GUESS_CHARS = 32  # characters guessed a step


class CorpusDraft:
    """``draft(row, ids) -> ids``: the characters that follow the last characters of ``ids``
    where the corpus has them (the first place found, longest context first), a line's end
    guessed as the recall's closing mark; nothing when the corpus does not have them."""

    def __init__(self, corpus: str, vocab: Vocab, guess_chars: int = GUESS_CHARS):
        self.text = corpus if corpus.endswith("\n") else corpus + "\n"
        self.vocab = vocab
        self.guess_chars = guess_chars

    def __call__(self, row: int, ids: list[int]) -> list[int]:
        tail = self.vocab.decode(ids[-CONTEXTS[0]:])
        for n in CONTEXTS:
            if len(tail) < n:
                continue
            at = self.text.find(tail[-n:])
            if at >= 0:
                return self._ids(self.text[at + n: at + n + self.guess_chars])
        return []

    def _ids(self, guess: str) -> list[int]:
        """The guess as ids, up to the line's end (the closing mark) or a character the
        vocabulary lacks."""
        ids = []
        for ch in guess:
            if ch == "\n":
                ids.append(self.vocab.stoi[MASK_CHAR])
                break
            if ch not in self.vocab.stoi:
                break
            ids.append(self.vocab.stoi[ch])
        return ids
