"""Play evaluation of a trained model (rule play): ``scoring`` one-pass scoring of every legal
move over ``branched`` token rows (a batch of games built on the host), ``matching``
move-matching tables with bootstrap intervals (``outcome`` an outcome head measured on the same
positions against two baselines, ``outcome_figures`` its table and figures,
rule outcome_figures; ``oracle`` the plain scorer the tests check
``scoring`` against) (``prepare`` the legal moves of games the token cache lacks, on the job's spare
cores), ``games`` the model's best moves and self-play (``decode`` its incremental decoding, a KV
cache), ``kernels`` the attention kernels of play's passes, ``split`` move-matching's attention
in two parts (main lines, branches over them), ``anchors`` the Elo ladder's players,
``ladder`` their round robin (rule ladder),
``inflight`` the model's games against them all in flight, ``elo`` the Elo fits, ``protocols`` which
positions move-matching counts, ``evaluate`` the parts bounded and resumable, ``workstate`` their
work in progress (resumed after a budget stop only), ``progress`` their log lines, ``outputs`` the
table of their files, ``records`` the one reader of each record (the report's and the model card's),
``plots`` the figures; ``ratings`` the rating prefix a conditioned model plays behind,
``counterfactual`` its positions at counterfactual ratings (``gaps`` with the outcome head: its
predicted result by the rating gap); ``uci`` the UCI engine
(``chesslm-uci``), ``wdl`` its score from an outcome checkpoint's head, ``analyse`` a PGN scored
move by move (``chesslm-analyse``; rule analyse: a dataset's validation split); ``settings`` a run's
play settings (``PlaySettings``, torch-free).

The summary.md section of ``results/{run}/play`` is ``chesslm.report.play_section``. Importing
this package imports nothing (``outputs``, ``records`` and ``settings`` are read without
torch). A checkpoint's model for inference is ``chesslm.model.weights``'s.
"""
