"""Training stages: the probe and bounded segments (rules probe, train_segment, results).

The model and the checkpoint file are ``chesslm.model``'s. ``batching`` the batch plan and
microbatches, ``loss`` the training loss, ``optim`` AdamW, its schedule and the gradient clip,
``compilation`` torch.compile, ``cuda_graphs`` captured updates, ``distributed`` process groups,
``trainer`` the update step, ``validation`` NLL/accuracy/legality, ``checkpoint`` a training
checkpoint's contents and the resume identity (``TRAINING_CODE``: the files it hashes), ``deadline``
time budgets, ``settings`` a run's settings (``RunSettings``), ``state`` its cursor and metrics
(``TrainState``), ``prefix`` the rating prefix of its batches, ``outcome`` the outcome head's
targets, loss and validation, ``human_time`` the time inputs and think-time targets of its
batches, ``launch`` how its ranks start and end, ``runlock`` the run's lock,
``resume`` the fresh-or-resume decision made under it, ``saver`` checkpoint saves in the background,
``segment_end`` the copy of a segment's final ``last.pt``,
``probe`` the GPU probe, ``segment`` the segment loop and its CLI, ``progress`` its console lines,
``status`` status files and results.
"""
