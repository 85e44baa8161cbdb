"""Play evaluation of a trained model (move-matching, free-running legality, Elo).

``markdown_section(play_dir)`` renders the summary.md section of ``results/{run}/play``.
"""

from chesslm.play.markdown import markdown_section

__all__ = ["markdown_section"]
