"""Play evaluation of a trained model (move-matching, free-running legality, Elo)."""
