"""What move-matching measures: ``metrics`` the metrics, one table every reader iterates,
``matching`` top-k agreement with the human move and its tables with game-bootstrap intervals,
``protocols`` which positions count, ``outcome`` an outcome head measured on the same positions
against two baselines, ``counterfactual`` positions scored at counterfactual ratings (``gaps``:
the outcome head's predicted result by the rating gap), ``think_time`` the think-time head
against its three baselines, ``think_table`` the one of them that is a table of time-control
class x 10-ply bucket.

Uses ``chesslm.scorer``; used by ``chesslm.play`` (the rule), ``chesslm.compare`` and the
engine's analyser.
"""
