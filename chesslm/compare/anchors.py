"""Published move-matching figures (top-1 agreement with the human move), each with the protocol
and test set it was measured under and its source (/work/shared/notes/chess-eval.md): reference
lines on a comparison's learning curve. They are not comparable with each other, nor with a
number of ours under another protocol: the label says which protocol each follows."""

from __future__ import annotations

from typing import NamedTuple


class Anchor(NamedTuple):
    model: str
    top1: float  # fraction
    protocol: str  # "maia2", "maia3" (chesslm.match.protocols) or another, spelled out
    test_set: str
    source: str

    @property
    def label(self) -> str:
        return f"{self.model} ≈{100 * self.top1:.0f} % ({self.protocol} protocol, {self.test_set})"


ANCHORS: tuple[Anchor, ...] = (
    Anchor("Maia-2", 0.53, "maia2", "Dec 2019",
           "CSSLab/maia2 (arXiv 2409.20553), configs/maia2-training-blitz.yaml"),
    Anchor("ALLIE", 0.557, "Allie's", "Lichess 2022 blitz, 18k games",
           "y0mingzhang/allie docs/DETAILS.md (arXiv 2410.03893)"),
    Anchor("Maia-3 79M", 0.5906, "maia3", "Allie's July-2026 blitz benchmark",
           "y0mingzhang/allie docs/DETAILS.md (arXiv 2605.19091)"),
    Anchor("Allie 2.0", 0.593, "maia3, 4 bands x 20k", "July 2026 blitz",
           "y0mingzhang/allie README.md, docs/DETAILS.md"),
)  # fmt: skip


def as_records() -> list[dict[str, object]]:
    return [{**a._asdict(), "label": a.label} for a in ANCHORS]
