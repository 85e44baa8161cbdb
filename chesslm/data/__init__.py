"""Data stages: PGN or Parquet -> verified dataset -> token cache (rules convert, verify,
token_cache).

``tokens`` the tokenizer, ``pgn`` reading PGN streams, ``parquet`` reading Lichess's Parquet
months, ``filters`` the Lichess filters, ``metadata`` the per-game columns (ratings, time
control, clocks), ``clocks`` Lichess's clock rule (time left before a move, time spent on it),
``split`` train/validation/test assignment, ``conditioning`` the rating
prefix in front of a game;
``settings`` a dataset's conversion settings; conversion into shards and a manifest by stage:
``convert`` (the entry point), ``workers`` (reader and worker processes), ``sources`` (the
input formats, one row each), ``parsing`` (a chunk's games), ``damage`` (the games skipped as
damaged, numbered per file), ``shards`` (shard files, duplicates), ``train_cap`` (the
``train_games`` subset), ``census`` (the manifest's edge-case counts);
``integrity`` the fingerprint and the receipt, ``gamearrays`` the on-disk array format,
``cache`` the token cache.
"""
