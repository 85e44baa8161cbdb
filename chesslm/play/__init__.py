"""Play evaluation of a trained model (rule play): ``scoring`` branched one-pass scoring of
every legal move, ``matching`` move-matching tables with bootstrap intervals, ``games`` the
model's best moves and self-play, ``anchors`` the Elo ladder's players, ``ladder`` their
round robin and the Elo fits (rule ladder), ``evaluate`` the parts bounded and resumable,
``outputs`` the table of their files, ``plots`` the figures; ``ratings`` the rating prefix a
conditioned model plays behind, ``counterfactual`` its positions at counterfactual ratings.

The summary.md section of ``results/{run}/play`` is ``chesslm.report.play_section``. Importing
this package imports nothing (``outputs`` is read without torch).
"""
