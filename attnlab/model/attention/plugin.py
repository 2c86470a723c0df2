"""Your own attention, by path: ``FILE.py:ClassName`` or ``package.module:ClassName`` wherever a
variant name is accepted (docs/guides/your-attention.md).

Two interfaces are accepted. The lab's: a subclass of ``Attention`` (usually
``DotProductAttention``) that defines ``queries_keys``, ``score_bias`` or ``normalize`` and gets
the fused path, the KV cache and masks from the base. The course's: any ``nn.Module`` built as
``Cls(config)`` whose ``forward(x)`` returns the attended values (B, T, C), as the assignment's
``CausalSelfAttention``; ``CourseAttention`` wraps it (its config also answers ``attn_pdrop`` and
``resid_pdrop``).

A model pins the file's content: ``pinned`` adds ``@sha256:HEX`` to the name, which the
checkpoint stores, so a run loads the same code again and a changed file is refused. Code is
imported only from the path (or module) the user named. Every problem is one ``PluginError``
line naming the user's file and line.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import Tensor, nn

from ...config.settings import ModelConfig
from .base import Attention, KVCache

PIN = "@sha256:"
SOURCE_DIR = "attention"  # a run directory's copy of the plug-in's source
_LOADED: dict[tuple[str, str], tuple[type, str]] = {}  # (file, class): (class, sha256)


class PluginError(ValueError):
    """A plug-in that cannot be used, in one line."""


def is_plugin(name: str) -> bool:
    """Whether a variant name is a path form rather than a registry name."""
    return ":" in name


def split(name: str) -> tuple[str, str, str | None]:
    """(file or module, class name, pinned sha256 or None) of a plug-in name."""
    name, _, sha = name.partition(PIN)
    where, _, cls = name.rpartition(":")
    if not where or not cls.isidentifier():
        raise PluginError(f"--attention {name!r}: expected FILE.py:ClassName or package.module:ClassName")
    return where, cls, sha or None


def display(name: str) -> str:
    """The name without its pin, for tables and logs."""
    return name.partition(PIN)[0]


def label(name: str) -> str:
    """A short name for tables, logs and directories: FILE.py:ClassName without its folders or
    pin (``synthesizer.py:SynthesizerAttention``); other names as they are."""
    if not is_plugin(name):
        return name
    where, cls, _ = split(name)
    return f"{Path(where).name if is_file(where) else where}:{cls}"


def dirname(name: str) -> str:
    """A directory name for a variant: ``synthesizer.py-SynthesizerAttention`` for a plug-in."""
    return label(name).replace(":", "-")


def is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def source_of(name: str) -> Path:
    """The file a plug-in's code is read from (a module's file for package.module)."""
    where, _, _ = split(name)
    if is_file(where):
        path = Path(where).expanduser()
        if not path.is_file():
            raise PluginError(f"{where}: no such file (the attention plug-in {display(name)!r})")
        return path.resolve()
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError) as e:
        raise PluginError(f"{where}: cannot find the module ({e})") from None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise PluginError(f"{where}: no such module on the Python path (the attention plug-in {display(name)!r})")
    return Path(spec.origin).resolve()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pinned(name: str) -> str:
    """``name`` with its file's content hash (unchanged when already pinned or not a plug-in);
    a pinned name whose file changed is refused."""
    if not is_plugin(name):
        return name
    where, cls, sha = split(name)
    try:
        path = source_of(name)
    except PluginError as e:
        if sha is None:
            raise
        raise PluginError(f"{e}; a run keeps a copy in RUN/{SOURCE_DIR}/{Path(where).name}: put it back "
                          "where it was") from None
    now = digest(path)
    if sha is not None and sha != now:
        raise PluginError(f"{path}: changed since the model was made with it (sha256 {sha[:12]}, now "
                          f"{now[:12]}); put back that version (a run keeps a copy in RUN/{SOURCE_DIR}/"
                          f"{path.name}) or train again")
    if is_file(where):
        where = str(path)  # absolute: the run loads from anywhere
    return f"{where}:{cls}{PIN}{now}"


def plugin_class(name: str) -> type[Attention]:
    """The Attention class of a plug-in name: the user's class, or CourseAttention wrapping it."""
    where, cls_name, _ = split(pinned(name))
    path = source_of(name)
    sha = digest(path)
    key = (str(path), cls_name)
    if _LOADED.get(key, (None, ""))[1] != sha:
        module = _import(where, path, sha, again=key in _LOADED)
        cls = getattr(module, cls_name, None)
        if cls is None:
            found = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
            raise PluginError(f"{path}: no class {cls_name!r} (classes there: {', '.join(found) or 'none'})")
        _LOADED[key] = (_interface(cls, path), sha)
    return _LOADED[key][0]


def _import(where: str, path: Path, sha: str, *, again: bool = False):
    """The user's module, imported from exactly ``path`` (or the named module; ``again``: its
    file changed since this process imported it)."""
    try:
        if not is_file(where):
            module = importlib.import_module(where)
            return importlib.reload(module) if again else module
        module_name = f"attnlab_plugin_{sha[:16]}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look classes up here
        spec.loader.exec_module(module)
        return module
    except Exception as e:  # noqa: BLE001: the user's code may raise anything; one line names it
        raise PluginError(user_error(e, path, "importing")) from None


def user_error(e: BaseException, path: Path, doing: str) -> str:
    """One line: the user's file and line where ``e`` arose, and what it was."""
    line = None
    if isinstance(e, SyntaxError) and e.filename and Path(e.filename).resolve() == path:
        line = e.lineno
    for frame in traceback.extract_tb(e.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    where = f"{path}:{line}" if line else str(path)
    message = " ".join(str(e).split()) or "(no message)"
    return f"{where}: {type(e).__name__} while {doing}: {message}"


def _interface(cls: object, path: Path) -> type[Attention]:
    """The lab's interface as it is, the course's wrapped; anything else refused."""
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise PluginError(f"{path}: {getattr(cls, '__name__', cls)!r} is not a torch.nn.Module class "
                          "(expected a subclass of attnlab's DotProductAttention, or a module whose forward(x) "
                          "returns the attended values)")
    if issubclass(cls, Attention):
        if cls.projections is Attention.projections and cls.queries_keys is Attention.queries_keys:
            raise PluginError(f"{path}: {cls.__name__} defines no queries_keys (the lab interface: return the "
                              "per-head queries, keys and the scale; or subclass DotProductAttention)")
        return cls
    if cls.forward is nn.Module.forward:
        raise PluginError(f"{path}: {cls.__name__} defines no forward(x)")
    params = [p for p in inspect.signature(cls.forward).parameters.values() if p.name != "self"]
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not params or len(required) > 1:
        raise PluginError(f"{path}: {cls.__name__}.forward takes ({', '.join(p.name for p in params)}); the course "
                          "interface is forward(x) returning the attended values (B, T, C)")
    return type(cls.__name__, (CourseAttention,), {"inner_class": cls, "source": path,
                                                   "summary": f"{cls.__name__} (course interface)"})


def course_config(config: ModelConfig) -> SimpleNamespace:
    """The model config as the course's modules read it: minGPT's names for the dropouts, and
    nanoGPT's ``bias`` (its linear layers take biases as the lab's do)."""
    return SimpleNamespace(**config.to_dict(), attn_pdrop=config.dropout, resid_pdrop=config.dropout,
                           embd_pdrop=config.dropout, bias=True)


class CourseAttention(Attention):
    """A course-interface module (forward(x) -> attended values) as a lab attention layer.

    The module masks causally itself, so the lab's masks are honoured by running it on the
    keys each query may see: a query must see a contiguous run of keys ending at itself (left
    padding, packed rows), one call per such run. Decoding caches the layer's inputs and runs
    the module again on them. Attention weights cannot be read out of it.
    """

    inner_class: type[nn.Module] = nn.Module
    source: Path = Path()
    fusable = False
    permutation_equivariant = False
    any_mask = False  # a run of keys ending at the query only (``_by_runs``)

    def __init__(self, config: ModelConfig):
        nn.Module.__init__(self)
        if not config.causal:
            raise PluginError(f"{self.source}: the course interface is causal attention; --no-causal needs "
                              "the lab interface (a DotProductAttention subclass)")
        self.config, self.n_head, self.head_dim = config, config.n_head, config.head_dim
        try:
            self.inner = self.inner_class(course_config(config))
        except Exception as e:  # noqa: BLE001: the user's constructor
            raise PluginError(user_error(e, self.source, f"building {self.inner_class.__name__}(config)")) from None

    def run_inner(self, x: Tensor) -> Tensor:
        y = self.inner(x)
        return y[0] if isinstance(y, tuple) else y

    def forward(self, x: Tensor, positions: Tensor, *, allowed: Tensor | None = None,
                cache: KVCache | None = None, key_positions: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            raise PluginError(f"{self.source}: {self.inner_class.__name__} (course interface) does not give its "
                              "attention weights; maps and attention losses need the lab interface")
        T = x.shape[1]
        if cache is not None:
            keys, _ = cache.extend(x[:, None], x.new_empty(x.shape[0], 1, T, 0))
            x = keys[:, 0]
        if allowed is None:
            if x.shape[1] != T:
                raise ValueError("a cached forward pass needs an explicit mask")
            return self.run_inner(x), None
        return self._by_runs(x, allowed, T), None

    def _by_runs(self, x: Tensor, allowed: Tensor, T: int) -> Tensor:
        """The last T positions' outputs, each query's visible keys run through the module."""
        B, S, _ = x.shape
        allowed = allowed[:, 0].expand(B, T, S)
        first = allowed.int().argmax(-1)  # (B, T): first visible key of each query
        query_at = S - T + torch.arange(T, device=x.device)
        span = torch.arange(S, device=x.device)[None, None]
        expected = (span >= first[..., None]) & (span <= query_at[None, :, None])
        if not bool((expected == allowed).all()):
            raise PluginError(f"{self.source}: {self.inner_class.__name__} (course interface) masks causally "
                              "itself and cannot take this mask (each query must see a run of keys ending at "
                              "itself); use the lab interface")
        out = x.new_zeros(B, T, x.shape[2])
        for b in range(B):
            starts = first[b].tolist()
            t = 0
            while t < T:
                end = t
                while end + 1 < T and starts[end + 1] == starts[t]:
                    end += 1
                hi = S - T + end + 1
                # Only a row that has finished decoding runs past the block (its positions are
                # clamped and its outputs unused): the module sees at most the block's last keys.
                lo = max(starts[t], hi - self.config.block_size)
                out[b, t : end + 1] = self.run_inner(x[b : b + 1, lo:hi])[0, -(end - t + 1):]
                t = end + 1
        return out
