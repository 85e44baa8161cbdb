"""The board (issue 57): ``chesslm-board``, a local web page that shows what a checkpoint thinks
of a game, ply by ply, and plays against it. ``cli`` the command (binds 127.0.0.1, prints the
URL; ``__main__`` runs it as ``python -m chesslm.board``), ``server`` the standard library's
HTTP server and its bounded JSON API, ``analysis`` one game scored by ``chesslm-analyse``'s own
functions (the same digits as its CSV), ``curve`` the played move's probability at ratings
800-2400 for a conditioned checkpoint, ``drawing`` the board as python-chess's SVG with the
model's moves as arrows, ``play`` the UCI engine's reply to a move; ``page.html`` the page
(plain JavaScript, no build step).

Above ``chesslm.engine`` (its analyse, session and PGN reader) and ``chesslm.export``; nothing
in the package imports it.
"""
