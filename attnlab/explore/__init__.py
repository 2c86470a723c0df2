"""The mathematics of attention, executable: ``attnlab explore``.

Each topic states a claim from the CS224N self-attention notes (and the lecture on
transformers), measures it numerically with a fixed-seed ``torch.Generator`` and reports the
numbers together with PASS/FAIL. A topic is a function ``ExploreOptions -> TopicResult`` that
registers itself with ``@topic(name, *needs)`` (base.py) in a module of its theme: one_head.py
(copy, average, project), heads.py (single-vs-multi-head, routing, temperature),
architecture.py (merged-qk, receptive-field, positions). :func:`run_topics` runs a selection;
:func:`add_arguments` and :func:`main` are what `attnlab explore` (attnlab/cli/probing.py) calls.
"""

from __future__ import annotations

import argparse

import importlib
import typing

from ..core import bounds
from ..core.lazy import exports
from ..core.paths import output_dir
from .options import ExploreError, ExploreOptions

if typing.TYPE_CHECKING:  # what type checkers and editors see
    from .architecture import constructed_picks, dependency_sets, fit_relative_bias, sinusoidal_positions
    from .base import DTYPE, NEEDS, TOPICS, TopicResult
    from .heads import KEY_NOISE, routing_setup, sample_keys, self_attention, temperature_tolerance
    from .one_head import average_weight, average_weight_fast

# Each theme's module and its topics, in the order of the notes (and of `all`). Importing a theme
# (with torch) registers its topics; that is done when a topic is run or looked up, so that the
# command line lists the topics without torch (tests/test_explore.py checks this list).
THEMES = {
    "one_head": ("copy", "average", "project"),
    "heads": ("single-vs-multi-head", "routing", "temperature"),
    "architecture": ("merged-qk", "receptive-field", "positions"),
}
TOPIC_NAMES = tuple(name for names in THEMES.values() for name in names)

__all__ = [
    "ExploreError", "ExploreOptions", "TopicResult", "TOPICS", "NEEDS", "DTYPE", "run_topics", "validate",
    "add_arguments", "main", "dependency_sets", "constructed_picks", "fit_relative_bias",
    "sinusoidal_positions", "routing_setup", "sample_keys", "self_attention", "temperature_tolerance",
    "average_weight", "average_weight_fast", "KEY_NOISE",
]

_DEFINED_IN = {
    **dict.fromkeys(["constructed_picks", "dependency_sets", "fit_relative_bias", "sinusoidal_positions"],
                    ".architecture"),
    **dict.fromkeys(["DTYPE", "NEEDS", "TOPICS", "TopicResult", "requirements"], ".base"),
    **dict.fromkeys(["KEY_NOISE", "routing_setup", "sample_keys", "self_attention", "temperature_tolerance"],
                    ".heads"),
    **dict.fromkeys(["average_weight", "average_weight_fast"], ".one_head"),
}
_exported, __dir__ = exports(__name__, _DEFINED_IN, __all__)


def __getattr__(name: str) -> typing.Any:
    """The topics and helpers, with every theme imported first (so TOPICS holds every topic)."""
    if name in _DEFINED_IN:
        for theme in THEMES:
            importlib.import_module(f".{theme}", __name__)
        topics = importlib.import_module(".base", __name__).TOPICS
        if list(topics) != list(TOPIC_NAMES):  # a theme imported on its own first: the notes' order
            ordered = {topic: topics[topic] for topic in TOPIC_NAMES}
            topics.clear()
            topics.update(ordered)
    return _exported(name)


def validate(names: list[str] | None, options: ExploreOptions) -> list[str]:
    """Error messages for options that make one of the selected topics meaningless."""
    requirements = __getattr__("requirements")
    return [e for name in _resolve(names) for e in requirements(name, options)]


def _resolve(names: list[str] | None) -> list[str]:
    if not names or names == ["all"] or "all" in names:
        return list(TOPIC_NAMES)
    unknown = [name for name in names if name not in TOPIC_NAMES]
    if unknown:
        raise ExploreError(f"unknown topic(s) {', '.join(unknown)}; choose from {', '.join(TOPIC_NAMES)} or all")
    return list(names)


def run_topics(names: list[str] | None, options: ExploreOptions) -> list[TopicResult]:
    """Run the named topics (all of them for None or "all") in registry order of the names given.

    Raises :class:`ExploreError` (before computing anything) if the options make a selected topic
    meaningless.
    """
    selected = _resolve(names)
    errors = validate(selected, options)
    if errors:
        raise ExploreError(errors)
    topics = __getattr__("TOPICS")
    return [topics[name](options) for name in selected]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ExploreOptions()
    parser.add_argument(
        "topic", nargs="?", default="all", choices=[*TOPIC_NAMES, "all"], metavar="TOPIC",
        help=f"which claim to check: one of {', '.join(TOPIC_NAMES)}, or all (default: %(default)s)",
    )
    parser.add_argument("--dim", type=bounds.positive_int, default=defaults.dim,
                        help="vector dimension d (model width J for merged-qk) (default: %(default)s)")
    parser.add_argument("--n", type=bounds.positive_int, default=defaults.n,
                        help="number of keys / sequence positions (default: %(default)s)")
    parser.add_argument("--beta", type=bounds.positive_float, default=defaults.beta,
                        help="scale b of queries (copy, average, single-vs-multi-head) and norm of the "
                             "u's in routing (default: %(default)s)")
    parser.add_argument("--samples", type=bounds.positive_int, default=defaults.samples,
                        help="Monte-Carlo samples for single-vs-multi-head and temperature "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=bounds.seed, default=defaults.seed,
                        help="seed for the torch.Generator of every topic (default: %(default)s)")
    parser.add_argument("--plot", dest="plot_dir", metavar="DIR", default=defaults.plot_dir,
                        help="write the single-vs-multi-head histogram PNG into DIR (default: %(default)s, "
                             "no plot)")


def main(args: argparse.Namespace) -> int:
    """Run the chosen topics and print them: 0 if all pass, 1 if any fails."""
    defaults = ExploreOptions()
    options = ExploreOptions(
        dim=getattr(args, "dim", defaults.dim),
        n=getattr(args, "n", defaults.n),
        beta=getattr(args, "beta", defaults.beta),
        samples=getattr(args, "samples", defaults.samples),
        seed=getattr(args, "seed", defaults.seed),
        plot_dir=getattr(args, "plot_dir", defaults.plot_dir),
    )
    if options.plot_dir:
        output_dir(options.plot_dir, "--plot")
    topic = getattr(args, "topic", "all")
    names = None if topic in (None, "all") else ([topic] if isinstance(topic, str) else list(topic))
    results = run_topics(names, options)  # ExploreError: the command line's one error handler
    for result in results:
        print(result.render())
        print()
    passed = sum(r.passed for r in results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1
