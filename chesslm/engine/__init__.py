"""The hand-over: ``uci`` the UCI engine (``chesslm-uci``, lichess-bot and GUIs: the protocol,
answering ``uci`` before torch is imported), ``options`` what it declares, ``session`` its model
side (loaded in a thread), ``commands`` what it reads from a ``position`` or ``go`` command's
words, ``kvcache`` its game's keys and values kept between ``go``
commands, ``wdl`` its score from an outcome checkpoint's head, ``think`` its
clocks from ``go`` and how long ``HumanTime`` waits, ``timeman`` the bound on that wait from
the clock, ``lines`` its input read as bytes, line by
line, ``analyse`` a PGN scored move by move (``chesslm-analyse``; rule analyse), ``pgnfile`` the
PGN file it reads, one game's text at a time, refusing what is not PGN in one line.

Above ``chesslm.export`` (it loads export folders as well as checkpoints), ``match`` and
``scorer``; nothing in the package imports it.
"""
