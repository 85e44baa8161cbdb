"""chesslm: train chess-move transformers on Lichess games, reproducibly.

Sub-packages mirror the workflow's stages: ``chesslm.data`` (convert, verify, token_cache),
``chesslm.train`` (probe, train_segment, results), ``chesslm.play`` (ladder, play),
``chesslm.compare`` (score, compare), ``chesslm.export`` (export) and ``chesslm.report``
(summarise); below them ``chesslm.model`` (the network and its presets) and
``chesslm.record`` (the recorders every stage writes through). ``config`` is the one front
door for settings (the config checked once, typed), ``layout`` where a run's and a dataset's
files live; ``files`` holds the digests
and the one atomic writer, ``seal`` the seals of the records later stages trust, ``logs`` the
logging of rule scripts, ``watch`` what ends every job with its snakemake, ``figures`` what
every figure shares (SVG bytes, the empty figure).
"""

__version__ = "0.1.0"
