"""Play evaluation of a trained model (rule play): ``scoring`` branched one-pass scoring of
every legal move, ``matching`` move-matching tables with bootstrap intervals, ``games``
self-play and games against Stockfish, ``elo`` the maximum-likelihood fit, ``evaluate`` the
three parts bounded and resumable, ``plots`` and ``markdown`` the report.

``markdown_section(play_dir)`` renders the summary.md section of ``results/{run}/play``.
"""

from chesslm.play.markdown import markdown_section

__all__ = ["markdown_section"]
