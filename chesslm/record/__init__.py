"""The record floor: what every stage writes and later stages read back, spelled once (above
``match``, whose metrics table the move-matching record's fields follow; below ``train``,
``play``, ``report``, ``export``, so all of them import from here): ``events``
(events.jsonl), ``telemetry`` (GPU telemetry), ``play_files`` (the play evaluation's files,
one table: rule play's outputs, the report's items), ``reader`` (a sealed play record read into
its dataclass, ``RecordError`` when it cannot be), then one module per play record, its
dataclasses and its reader: ``move_match`` (with the heads' outcome and think-time measures),
``legality``, ``elo`` (and the Elo's sentences), ``counterfactual``; ``play_records`` (a run's
play records: ``READERS`` by name, ``read_play``, the summary's and the model card's)."""
