"""Layer 3, the model: the GPT (``gpt``), the attention registry and its variants
(``attention/``), position schemes, dropout and the fast path, decoding, checkpoints and the
shipped model.

``attnlab.model.GPT`` works as it did when ``model`` was a module."""

from .gpt import GPT, Block

__all__ = ["GPT", "Block"]
