"""chesslm: train chess-move transformers on Lichess games, reproducibly.

One concept per module: ``tokens`` (the tokenizer), ``pgn`` (reading PGN streams),
``split`` (train/validation/test assignment), ``dataset`` (conversion into shards and a
manifest), ``integrity`` (hashes and the receipt), ``cache`` (the token cache), then the
training modules (``model``, ``batching``, ``checkpoint``, ``distributed``, ``evaluate``,
``segment``) and ``summary`` for reports.
"""

__version__ = "0.1.0"
