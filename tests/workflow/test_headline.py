"""summary.md's first answer says how much it rests on (chesslm.report.play_section): when
the headline protocol keeps too few games for an interval, or far fewer than another protocol,
the same line says so and gives that protocol's figure with its interval beside it; never a
bare "(no interval)"."""

from __future__ import annotations

from pathlib import Path

from tests.workflow.test_summary import answer, glance, make_run, match_record, match_row

OTHER = "under `all`: **30.0% [27.9%, 31.9%]**, 1200 positions"


def top1(tmp_path: Path, rows: list[dict]) -> str:
    lines, _ = glance(make_run(tmp_path / "run"), move_match=match_record(rows))
    return answer(lines, "Top-1")


def test_nine_headline_games_give_the_other_protocols_figure_in_the_same_line(tmp_path):
    """The issue's case: clocks in a fifth of the games, maia2 kept 9 of 40."""
    line = top1(tmp_path, [match_row("maia2", 0.117, games=9, few=True), match_row("all", 0.3)])
    assert "`lichess` **11.7% (no interval)** (9 games: fewer than 10)" in line
    assert "(only 9 games, too few for an interval, against 40 under `all`;" in line
    assert OTHER in line
    assert "config/README.md, `match.protocols`, says how to choose" in line


def test_far_fewer_headline_games_say_so_with_an_interval_too(tmp_path):
    line = top1(tmp_path, [match_row("maia2", 0.25, games=12), match_row("all", 0.3, games=40)])
    assert "**25.0% [22.9%, 26.9%]**" in line
    assert "(only 12 games, far fewer, against 40 under `all`;" in line
    assert "under `all`: **30.0% [27.9%, 31.9%]**" in line


def test_a_headline_on_most_of_the_games_stands_alone(tmp_path):
    line = top1(tmp_path, [match_row("maia2", 0.25, games=30), match_row("all", 0.3, games=40)])
    assert "**25.0% [22.9%, 26.9%]**" in line and "under `all`" not in line
    assert "only" not in line


def test_too_few_games_under_every_protocol_says_how_to_get_an_interval(tmp_path):
    few = [match_row("maia2", 0.25, games=8, few=True), match_row("all", 0.3, games=8, few=True)]
    line = top1(tmp_path, few)
    assert "**25.0% (no interval)** (8 games: fewer than 10)" in line
    assert "(more games for an interval: `play.match.games`)" in line
