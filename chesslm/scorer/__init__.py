"""How the model scores positions, shared by rule play, rule score, the analyser and the engine:
``scoring`` one pass scores every legal move over ``branched`` token rows (a batch of games
built on the host), ``split`` that pass's attention in two parts (main lines, branches over
them), ``kernels`` the attention kernels, ``decode`` incremental decoding with a KV cache,
``prepare`` the legal moves of games the token cache lacks (on the job's spare cores),
``ratings`` the rating prefix a conditioned model plays behind, ``times`` the clocks a
timed model is fed in play, ``threads`` torch's threads for a job, ``oracle`` the plain
scorer the tests check ``scoring`` against, ``settings`` what it is asked to score and how (a
run's ``PlaySettings``, ``runs.NAME.play``; its ``Match`` is rule score's and the analyser's
scoring settings too; torch-free, so the config types them without importing play).

Below ``match``, ``ladder``, ``play`` and ``engine``; above ``model`` and ``data``.
"""
