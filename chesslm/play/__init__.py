"""Rule play, the conductor: ``evaluate`` runs the parts bounded and resumable (``job`` what
they share, one module per part: ``move_match``, ``legality``, ``elo_games``,
``counterfactual_ratings``), ``workstate`` their work in progress (resumed after a budget stop
only), ``plots`` and ``outcome_figures`` the figures. A run's play settings
(``PlaySettings``) are the scorer's (``chesslm.scorer.settings``).

What the parts measure lives below: ``chesslm.match`` (move-matching), ``chesslm.ladder``
(games and Elo), ``chesslm.scorer`` (the batched scorer). The table of their files and
their records' shapes live in the record floor (``chesslm.record.play_files``,
``chesslm.record.play_records``), so the report and the export read them without importing
play. Importing this package imports nothing.
"""
