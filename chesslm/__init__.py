"""chesslm: train chess-move transformers on Lichess games, reproducibly.

Sub-packages mirror the workflow's stages: ``chesslm.data`` (convert, verify, token_cache),
``chesslm.train`` (probe, train_segment, results), ``chesslm.report`` (summarise) and
``chesslm.play`` (play evaluation). ``files`` holds the digests and the one atomic writer,
``logs`` the logging of rule scripts.
"""

__version__ = "0.1.0"
