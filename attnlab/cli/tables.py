"""Tables for people: labelled columns, aligned, two spaces apart (``ask``, ``calibrate``, ``audit``).

A value never carries its label ("confidence 0.75"): the label is the column's header, so a
column can be read down and cut out. Numbers are right-aligned, text left-aligned.
"""

from __future__ import annotations

from typing import Collection, Sequence

GAP = "  "


def row_text(cells: Sequence[str], widths: Sequence[int], right: Collection[int] = ()) -> str:
    """One row: each cell padded to its width (the cells at the ``right`` indexes right-aligned;
    the last cell padded only when right-aligned), trailing spaces removed."""
    padded = []
    for i, (cell, width) in enumerate(zip(cells, widths)):
        last = i == len(cells) - 1
        padded.append(cell.rjust(width) if i in right else cell if last else cell.ljust(width))
    return GAP.join(padded).rstrip()


def widths_of(rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its longest cell (the header included)."""
    return [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = (),
          indent: str = "") -> str:
    """A header line and one line per row, every column aligned."""
    every = [list(header)] + [list(r) for r in rows]
    widths = widths_of(every)
    return "\n".join(indent + row_text(r, widths, right) for r in every)
