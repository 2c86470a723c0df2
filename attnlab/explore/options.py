"""The options of ``attnlab explore`` and its error, without torch: the command line builds its
flags from them (attnlab/explore/__init__.py ``add_arguments``) before any topic is imported."""

from __future__ import annotations

from dataclasses import dataclass


class ExploreError(ValueError):
    """Options that make a topic meaningless (raised before anything is computed); one
    message per problem in ``messages``."""

    def __init__(self, messages: list[str] | str):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("; ".join(self.messages))


@dataclass(frozen=True)
class ExploreOptions:
    dim: int = 64
    n: int = 8
    beta: float = 10.0
    samples: int = 2000
    seed: int = 0
    plot_dir: str | None = None
