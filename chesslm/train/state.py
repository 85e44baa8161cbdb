"""A run's stop reasons: which statuses end it and which a later segment resumes from."""

from __future__ import annotations

# a segment that stops for one of these ends the run; resuming it is a no-op with a receipt
TERMINAL = ("early_stop_5_checks", "max_updates", "max_epochs")
