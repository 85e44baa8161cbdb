"""Comparisons of runs on the same validation positions (rule score, rule compare): each run's
per-position scores, aligned; per-run metrics and paired differences with bootstrap intervals
over games; a learning curve against the published anchors. Above ``play`` (whose scorer it
calls), below ``report``.

``settings`` a comparison's settings (``Comparison``), ``scores`` rule score (one run's
``positions.npz``), ``positions`` those tables loaded and aligned, ``stats`` metrics and paired
bootstrap differences (and Allie's band shape), ``anchors`` the published figures,
``plots`` the figures, ``outputs`` the figures' table (torch-free: the rules read it), ``build``
rule compare.
"""
