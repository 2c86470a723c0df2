"""What values a number may take: one ``Bound`` per setting, shared by the command line's
parser (``Bound.argtype``: argparse refuses a bad value with exit code 2, naming the flag), the
config classes' own checks (config.py, so config files and library use are checked too) and
the options of commands that are not config fields (attnlab/cli/*.py, attnlab/explore).

A number that is not finite (nan, inf) is never a valid setting.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Bound:
    """An integer or real number, optionally limited below and above (each end open or
    closed)."""

    kind: type  # int or float
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is excluded
    high_open: bool = False  # high itself is excluded
    name: str = "number"  # the argparse type's name

    def describe(self) -> str:
        """e.g. 'an integer >= 1', 'a number in [0, 1)', 'a number > 0'."""
        what = "an integer" if self.kind is int else "a finite number"
        if self.low is not None and self.high is not None:
            return (f"{what} in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{what} {'<' if self.high_open else '<='} {self.high:g}"
        return what

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (a Python number, not text) is of the kind and in range."""
        if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
            return False
        try:
            if not math.isfinite(value):  # an int is finite, but one past float's range is no float
                return False
        except OverflowError:
            return self.kind is int
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def problem(self, value: Any) -> str | None:
        """None when ``value`` holds, else 'must be ..., got ...'."""
        return None if self.holds(value) else f"must be {self.describe()}, got {value!r}"

    def parse(self, text: str) -> int | float:
        """The number written in ``text``; ValueError saying what it must be."""
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            value = None
        if value is None or not self.holds(value):
            raise ValueError(f"must be {self.describe()}, got {text!r}")
        return value

    def argtype(self) -> Callable[[str], int | float]:
        """The argparse ``type=`` of a flag with this bound (its ``.bound`` says which)."""

        def parse(text: str) -> int | float:
            try:
                return self.parse(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        parse.__name__ = self.name
        parse.bound = self  # type: ignore[attr-defined]  # read by tests and the config-file check
        return parse


POSITIVE_INT = Bound(int, 1, name="positive_int")
NON_NEGATIVE_INT = Bound(int, 0, name="non_negative_int")
SEED = Bound(int, 0, 2**63 - 1, name="seed")  # what torch.manual_seed takes
POSITIVE = Bound(float, 0, low_open=True, name="positive_float")
NON_NEGATIVE = Bound(float, 0, name="non_negative_float")
UNIT = Bound(float, 0, 1, name="unit_interval")  # [0, 1]: probabilities, shares, floors
FRACTION = Bound(float, 0, 1, high_open=True, name="fraction")  # [0, 1): dropout, held-out share
OPEN_UNIT = Bound(float, 0, 1, low_open=True, high_open=True, name="open_unit_interval")  # (0, 1)
TOP_P = Bound(float, 0, 1, low_open=True, name="top_p")  # (0, 1]
# compare's seeds: each trains every variant (or is gathered from records); a grid holds a few
COMPARE_SEEDS = Bound(int, 1, 100, name="seeds")


def listed(bound: Bound) -> Callable[[str], list]:
    """The argparse ``type=`` of a comma-separated list of numbers, each within ``bound``."""

    def parse(text: str) -> list:
        try:
            return [bound.parse(part.strip()) for part in text.split(",")]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"each of {text!r}: {e}") from None

    parse.__name__ = f"list_of_{bound.name}"
    return parse


def at_least(low: int, kind: type = int) -> Bound:
    return Bound(kind, low, name=f"at_least_{low}")


positive_int = POSITIVE_INT.argtype()
non_negative_int = NON_NEGATIVE_INT.argtype()
non_negative_ints = listed(NON_NEGATIVE_INT)
seed = SEED.argtype()
positive_float = POSITIVE.argtype()
non_negative_float = NON_NEGATIVE.argtype()
unit_interval = UNIT.argtype()
open_unit_interval = OPEN_UNIT.argtype()
