"""What every figure of the pipeline shares (report and play alike): SVG bytes that depend on
the data alone, written atomically, and the figure that says in words why there is nothing to
plot. matplotlib's object API only (``Figure``, never ``pyplot``): no global backend."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import matplotlib
from matplotlib.figure import Figure

from chesslm import files

# Fixed ids and no date make the SVG bytes depend on the data alone.
SVG_RC = {"svg.hashsalt": "chesslm", "svg.fonttype": "none"}
# The canvas cut to what is drawn, plus this margin (inches): a figure's size is chosen before
# its text is known, and a notice's one line left over half of its canvas blank (issue 59).
PAD_INCHES = 0.04
STYLES = ("-", "--", ":")  # one line style per protocol, in the order asked


def save_svg(fig: Figure, path: Path) -> None:
    """Write a figure as SVG whose bytes depend on the data alone (atomically), its canvas
    cut to what it draws (``PAD_INCHES`` around)."""

    def write(fh: IO[bytes]) -> None:
        with matplotlib.rc_context(SVG_RC):
            fig.savefig(
                fh, format="svg", metadata={"Date": None}, bbox_inches="tight",
                pad_inches=PAD_INCHES,
            )  # fmt: skip

    files.write_atomic(path, write)


def notice_figure(title: str, message: str) -> Figure:
    """A small figure that states in words why there is nothing to plot."""
    fig = Figure(figsize=(7, 1.6), layout="constrained")
    fig.suptitle(title)
    fig.text(0.5, 0.4, message, ha="center", va="center", wrap=True)
    return fig
