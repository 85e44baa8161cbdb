"""Which positions each move-matching protocol keeps, on hand-made games with known clocks, and
the config's default."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from chesslm.match import protocols
from tests.helpers import ROOT

MISSING = -1.0


def _meta(clocks: list[list[float]], base: float = 180.0) -> dict[str, np.ndarray]:
    """Metadata columns of games whose ply p's clock comment (after the move) is clocks[g][p]."""
    lengths = [len(c) for c in clocks]
    return {
        "clock": np.array([x for c in clocks for x in c], dtype=np.float32),
        "ply_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "base_seconds": np.full(len(clocks), base, dtype=np.int32),
    }


def _kept(name: str, clocks: list[list[float]], base: float = 180.0) -> list[list[int]]:
    """The plies ``name`` keeps in each game."""
    meta = _meta(clocks, base)
    game = np.concatenate([np.full(len(c), g) for g, c in enumerate(clocks)])
    ply = np.concatenate([np.arange(len(c)) for c in clocks])
    keep = protocols.PROTOCOLS[name].keep(game, ply, meta)
    return [sorted(ply[keep & (game == g)].tolist()) for g in range(len(clocks))]


def test_maia2_keeps_a_move_whose_own_clock_is_above_30_s_strictly():
    clocks = [100.0] * 16
    clocks[11] = 30.0  # exactly 30 s after the move: dropped (Maia-2: clock_info > 30)
    clocks[12] = 30.5
    clocks[13] = MISSING  # no clock comment: dropped (read as 0)
    clocks[14] = 10.0  # black under 30 s after this move: dropped, and only this ply
    assert _kept("maia2", [clocks]) == [[10, 12, 15]]


def test_maia2_judges_the_clock_after_the_move_not_before():
    # white has 20 s left after ply 10 and 100 s after ply 12 (an increment): ply 12 is kept
    # though white had 20 s before playing it, ply 10 dropped though white had 100 s before
    clocks = [100.0] * 10 + [20.0, 100.0, 100.0, 100.0]
    assert _kept("maia2", [clocks]) == [[11, 12, 13]]


def test_maia2_stops_after_maia2s_max_ply():
    n = protocols.MAIA2_MAX_PLY + 5
    assert _kept("maia2", [[100.0] * n])[0][-1] == protocols.MAIA2_MAX_PLY


def test_maia3_drops_every_ply_from_the_first_time_a_mover_has_under_30_s():
    clocks = [100.0] * 20
    clocks[12] = 29.0  # white under 30 s after ply 12: white to move at ply 14 has 29 s
    clocks[15] = 100.0
    assert _kept("maia3", [clocks]) == [list(range(10, 14))]


def test_maia3_counts_plies_before_the_skipped_opening_and_exactly_30_s_is_not_under():
    early = [100.0] * 20
    early[3] = 25.0  # black under 30 s after ply 3, to move at ply 5: nothing kept after
    exact = [100.0] * 14
    exact[10] = 30.0  # exactly 30 s is not "fewer than 30 seconds"
    assert _kept("maia3", [early, exact]) == [[], list(range(10, 14))]


def test_maia3_a_missing_clock_never_stops_the_game_and_the_base_time_counts():
    clocks = [100.0] * 14
    clocks[9] = MISSING
    assert _kept("maia3", [clocks]) == [list(range(10, 14))]
    # a 15-second game: each player has under 30 s before their first move
    assert _kept("maia3", [[10.0] * 14], base=15.0) == [[]]


def test_all_keeps_every_position_and_names_are_checked():
    assert _kept("all", [[MISSING] * 5]) == [[0, 1, 2, 3, 4]]
    assert [p.name for p in protocols.chosen(["maia3", "all"])] == ["maia3", "all"]
    with pytest.raises(ValueError, match=r"match.protocols: \['maia'\] not among"):
        protocols.chosen(["maia"])


def test_each_protocol_text_names_its_anchors_file():
    assert "CSSLab/maia2, maia2/main.py" in protocols.PROTOCOLS["maia2"].text
    assert "y0mingzhang/allie, docs/DETAILS.md" in protocols.PROTOCOLS["maia3"].text


def test_the_default_is_maia2_first_in_the_schema_and_the_code():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    match = schema["properties"]["runs"]["additionalProperties"]["properties"]["play"]
    default = match["properties"]["match"]["properties"]["protocols"]["default"]
    assert default == list(protocols.DEFAULT) and default[0] == "maia2"
    enum = match["properties"]["match"]["properties"]["protocols"]["items"]["enum"]
    assert enum == list(protocols.PROTOCOLS)


def test_the_demos_64_games_give_the_issues_counts(tmp_path):
    """Issue 24's figures on the demo's move-matching games (64 evenly spaced of the sample's
    258 validation games, converted by the real converter): 3,519 positions by the rule before
    it (the mover's clock before the move, at least 30 s, unknown kept), 3,481 by Maia-2's
    rule with absent clocks kept; ``maia2`` follows Maia-2's code and drops those too."""
    from chesslm.data import convert, gamearrays, metadata, settings
    from chesslm.match import matching

    convert.convert([ROOT / "resources/lichess-sample.pgn.zst"], tmp_path, settings.Settings())
    prefix = tmp_path / "validation" / "00000"
    games = gamearrays.Games(prefix)
    meta = metadata.Metadata(prefix, games.offsets)
    cols = {name: np.asarray(meta[name]) for name in metadata.COLUMNS}
    cols["ply_offsets"] = meta.ply_offsets
    plies = np.diff(meta.ply_offsets)
    chosen = matching.evenly_spaced(len(games), 64)
    game = np.concatenate([np.full(plies[g], g) for g in chosen])
    ply = np.concatenate([np.arange(plies[g]) for g in chosen])
    pos = {"game": game, "ply": ply, "rank": np.zeros(len(ply)), "n_legal": np.ones(len(ply))}
    before = matching.position_features(pos, cols)["clock"]
    assert int(((ply >= 10) & ~((before >= 0) & (before < 30))).sum()) == 3519
    after = protocols.clock_after(game, ply, cols)
    assert int(((ply >= 10) & ((after > 30) | (after < 0))).sum()) == 3481
    absent = int(((ply >= 10) & (after < 0)).sum())
    assert (
        absent > 0
        and int(protocols.PROTOCOLS["maia2"].keep(game, ply, cols).sum()) == 3481 - absent
    )


@pytest.mark.parametrize("name", list(protocols.PROTOCOLS))
def test_no_positions_keep_nothing(name):
    """A run stopped before its first chunk has no positions (loaded as empty float arrays)."""
    empty = np.zeros(0)
    assert not len(protocols.PROTOCOLS[name].keep(empty, empty, _meta([[100.0] * 12])))
