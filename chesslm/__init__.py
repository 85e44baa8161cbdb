"""chesslm: train chess-move transformers on Lichess games, reproducibly.

Sub-packages mirror the workflow's stages: ``chesslm.data`` (convert, verify, token_cache),
``chesslm.train`` (probe, train_segment, results), ``chesslm.play`` (play: the rule's
conductor), ``chesslm.ladder`` (ladder: games against anchors and the Elo), ``chesslm.compare``
(score, compare), ``chesslm.export`` (export), ``chesslm.engine`` (analyse, and the UCI
engine: the hand-over), ``chesslm.board`` (the analysis board and play page in the browser)
and ``chesslm.report`` (summarise); below them ``chesslm.match`` (what
move-matching measures), ``chesslm.scorer`` (how the model scores positions),
``chesslm.model`` (the network and its presets) and ``chesslm.record`` (the recorders every
stage writes through). ``config`` is the one front door for settings (the config checked once,
typed), ``layout``
where a run's and a dataset's files live; ``files`` holds the digests and the one atomic
writer, ``seal`` the seals of the records later stages trust, ``commands`` the snakemake
command lines chesslm prints (with the run's ``--configfile`` files), ``logs`` the logging of rule
scripts, ``watch`` what ends every job with its snakemake, ``owner`` one job per output folder
at a time (its lock, and a killed writer's temporaries removed), ``progress`` the progress
lines of long loops, ``figures`` what every figure shares (SVG bytes, the empty figure).
"""

__version__ = "0.1.0"
