"""Recorders every stage writes through (below ``train`` and ``report``, so both may import
them): ``events`` (events.jsonl), ``telemetry`` (GPU telemetry)."""
