"""One default per play key: rule play, rule score and the analyser (rule analyse and
``chesslm-analyse``) score with the same ``play.match`` settings unless the user sets them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from chesslm.compare import scores
from chesslm.engine import analyse
from chesslm.scorer.settings import Match, PlaySettings

ROOT = Path(__file__).resolve().parents[2]


def _default(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default


def test_score_and_analyse_default_to_plays_match_settings() -> None:
    match = PlaySettings().match
    assert match == Match()
    assert _default(scores.score, "batch_tokens") == match.batch_tokens
    assert _default(scores.score, "chunk_games") == match.chunk_games
    for function in (analyse.analyse, analyse.analyse_validation):
        assert _default(function, "batch_tokens") == match.batch_tokens


def test_the_rules_pass_the_runs_own_match_settings() -> None:
    """Rules score and analyse read the run's ``play.match`` keys (the user's value, or the
    schema's default, which tests/workflow/test_config.py holds equal to ``Match``'s)."""
    for rule, keys in (
        ("compare", ("batch_tokens", "chunk_games")),
        ("analyse", ("batch_tokens",)),
    ):
        text = (ROOT / "workflow" / "rules" / f"{rule}.smk").read_text()
        for key in keys:
            assert re.search(rf"{key}=of_play\(lambda p: p\.match\.{key}\)", text), (rule, key)
