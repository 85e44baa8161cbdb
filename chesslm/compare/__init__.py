"""Comparisons of runs on the same validation positions (rule score, rule compare): each run's
per-position scores, aligned; per-run metrics and paired differences with bootstrap intervals
over games; a learning curve against the published anchors. Above ``play`` (whose scorer it
calls), below ``report``."""
