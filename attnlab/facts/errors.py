"""The errors of editing (``attnlab edit``, ``LoadedModel.edit``, the web lab's edits), apart from
tracing's ``TraceError``: torch-free, so that the command line can name them without loading a
model."""

from __future__ import annotations


class EditError(ValueError):
    """A request to edit that cannot be made (an unknown person, a place the vocabulary cannot
    spell, a second edit of the same fact, a model whose edits cannot be undone), reported as one
    line before any model work, nothing written (the command line's exit code 2)."""


class EditFailed(EditError):
    """An edit that did not reach its target: nothing is written (the command line's exit code 1)."""
