"""One plotting set-up for every figure attnlab writes: matplotlib on the non-interactive Agg
backend (figures go to files, never to a window, so a machine without a display draws them)."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend selected."""
    import matplotlib  # imported here, so commands that draw nothing never import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
