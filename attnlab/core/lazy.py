"""Names a package re-exports but imports only when first used (PEP 562), so that importing the
package (or a torch-free module of it) does not import torch: the command line builds its
parser and prints --help without it."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def exports(package: str, table: dict[str, str], public: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``table`` maps each re-exported name to
    the module that defines it (relative to the package); a name is imported on first use and
    then kept in the package. ``dir()`` lists the public names, ``public``, and the submodules
    already imported."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name], package), name)
        setattr(sys.modules[package], name, value)  # imported once
        return value

    def __dir__() -> list[str]:
        module = vars(sys.modules[package])
        loaded = {k for k, v in module.items() if type(v) is type(sys) and not k.startswith("_")}
        return sorted(set(public) | loaded)

    return __getattr__, __dir__
