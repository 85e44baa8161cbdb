"""Records and reports (rule summarise): ``events`` (events.jsonl), ``telemetry`` (GPU
telemetry), ``summary`` (tables and the CLI), ``markdown`` (summary.md), ``plots``."""
