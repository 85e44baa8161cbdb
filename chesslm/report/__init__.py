"""Reports (rule summarise): ``items`` (the report items, one table), ``run_reader`` (what a
run left, read: ``RunRecords``, ``RunState``), ``summary`` (tables and the CLI), ``markdown``
(summary.md), ``cells`` (its numbers and pipe tables), ``play_section`` (its play section),
``plots``, ``sample_games`` (the validation games summary.md's analyse command runs on),
``staleness`` (a finished run that no longer matches the config).
The recorders the stages write through are ``chesslm.record``."""
