"""The model floor: what training, play, export and compare all read.

``presets`` the model sizes and contexts (``GPTConfig``, with the input layout it reads:
``conditioning``; torch-free, so the workflow checks a config against them at parse time),
``gpt`` the network, ``checkpoint`` the checkpoint file format (atomic save, verify, safe load),
``weights`` a checkpoint's model for inference (play, the UCI engine, the export), ``outcome``
what the outcome head predicts (its classes at a position, the frequency baseline; NumPy only),
``human_time`` what the time inputs read and the think-time head predicts (its bins; NumPy only).
The training identity a checkpoint carries is ``chesslm.train.checkpoint``'s.
"""
