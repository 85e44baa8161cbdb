"""Records and reports (rule summarise): ``events`` (events.jsonl), ``telemetry`` (GPU
telemetry), ``items`` (the report items, one table), ``summary`` (tables and the CLI),
``markdown`` (summary.md), ``plots``, ``staleness`` (a finished run that no longer matches
the config)."""
