"""Games against anchors and the Elo: ``players`` the anchors (random, greedy, Stockfish) and
the model as a player, ``games`` the model's best moves and self-play, ``round_robin`` the
ladder's round robin among the anchors (rule ladder), ``inflight`` the model's games against
them all in flight, ``elo`` the Bradley-Terry fits.

Uses ``chesslm.scorer``; used by ``chesslm.play`` and the config's plan-time checks.
"""
