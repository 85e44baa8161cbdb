"""Rule play, the conductor: ``evaluate`` runs the parts bounded and resumable (``job`` what
they share, one module per part: ``move_match``, ``legality``, ``elo_games``,
``counterfactual_ratings``), ``workstate`` their work in progress (resumed after a budget stop
only), ``outputs`` the table of their files, ``records`` the one reader of each record (the
report's and the model card's), ``plots`` and ``outcome_figures`` the figures; ``settings`` a
run's play settings (``PlaySettings``, torch-free; training's identity reads it, so it stays).

What the parts measure lives below: ``chesslm.match`` (move-matching), ``chesslm.ladder``
(games and Elo), ``chesslm.scorer`` (the batched scorer). Importing this package imports
nothing (``outputs``, ``records`` and ``settings`` are read without torch).
"""
