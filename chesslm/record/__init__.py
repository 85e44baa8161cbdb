"""The record floor: what every stage writes and later stages read back, spelled once (above
``match``, whose metrics table the move-matching record's fields follow; below ``train``,
``play``, ``report``, ``export``, so all of them import from here): ``events``
(events.jsonl), ``telemetry`` (GPU telemetry), ``play_files`` (the play evaluation's files,
one table: rule play's outputs, the report's items), ``play_records`` (each play record's
shape, a dataclass, and its one reader: the summary's and the model card's)."""
