"""Move-matching (chesslm.match.matching): windows of chunks, prepared games, bootstrap
tables, groups too small for an interval."""

from __future__ import annotations

import threading
import time

import chess
import chess.engine
import chess.pgn
import numpy as np
import pandas as pd
import pytest
import torch

from chesslm.data import tokens
from chesslm.match import matching, metrics, protocols
from chesslm.model import gpt
from chesslm.play import plots
from chesslm.scorer import branched, prepare, scoring
from chesslm.scorer.oracle import oracle_scores
from chesslm.scorer.settings import PlaySettings
from tests.playkit import (
    assert_same_positions,
    cpu_evaluator,
    positions_with_a_lone_game,
    random_positions,
    sample_pgn_games,
    scorer_input,
    small_cache,
)

typed = PlaySettings.from_dict  # rule play's script types the play settings so


def test_windows_order_chunks_by_length_score_as_contiguous_chunks_and_stop_at_their_end(
    tmp_path, net
):
    """Chunks of 4 games from windows of 2 chunks: each window holds the same games as the
    contiguous chunks, shortest first, and scores the same positions with the same numbers; a
    time budget past after the first chunk stops the run at its window's end (two chunks
    written), where contiguous chunks stop after the first; the next run resumes the rest."""
    small = small_cache(tmp_path)
    plain, windowed = (cpu_evaluator(net, small, tmp_path / f"w{w}", chunk_games=4, window=w)
                       for w in (1, 2))  # fmt: skip
    lengths = np.asarray(windowed.games.lengths)
    assert [sorted(c) for c in plain.chunks] == [list(range(i, i + 4)) for i in range(0, 20, 4)]
    for w in range(0, 5, 2):
        games = np.concatenate(windowed.chunks[w : w + 2])
        assert sorted(games.tolist()) == list(range(4 * w, min(4 * w + 8, 20)))
        assert np.all(np.diff(lengths[games]) >= 0)  # shortest first
    assert [windowed.ends_window(i) for i in range(5)] == [False, True, False, True, True]

    class Slow:  # the progress callback: the budget passes while the first chunk is scored
        def update(self, done):
            time.sleep(0.3)

    for ev, kept in ((plain, 1), (windowed, 2)):
        assert not ev.run(time.monotonic() + 0.2, Slow())
        assert [ev.chunk_path(i).exists() for i in range(5)] == [True] * kept + [False] * (5 - kept)
        assert ev.run(time.monotonic() + 300)
    assert_same_positions(plain.positions(), windowed.positions())


def test_tables_bootstrap_interval_brackets_the_estimate():
    n_games, per = 40, 30
    pos = random_positions(n_games, per, seed=0)
    meta = {
        "white_elo": np.full(n_games, 1500), "black_elo": np.full(n_games, 2450),
        "speed": np.full(n_games, 2), "base_seconds": np.full(n_games, 180),
        "clock": np.full(n_games * per, 100.0), "ply_offsets": np.arange(n_games + 1) * per,
    }  # fmt: skip
    rows = matching.tables(pos, meta, protocols.chosen(["maia2", "all"]), replicates=200, seed=0)
    by = {(r["protocol"], r["grouping"], r["group"]): r for r in rows}
    overall = by[("all", "overall", "all")]
    assert overall["top1"] == pytest.approx(np.mean(pos["rank"] == 0))
    assert overall["top1_low"] < overall["top1"] < overall["top1_high"]
    assert by[("all", "band", "1400-2000")]["positions"] == n_games * per // 2
    assert by[("all", "band", "2400+")]["positions"] == n_games * per // 2
    assert by[("maia2", "overall", "all")]["positions"] == n_games * (per - 10)
    assert by[("all", "speed", "blitz")]["games"] == n_games


@pytest.mark.parametrize(
    ("play", "named"),
    [
        ({"split": "test"}, "split"),
        ({"match": {"gamez": 3}}, "gamez"),
        ({"elo": {"games_per_anchor": -1}}, "games_per_anchor"),
        ({"legality": {"games": 0}}, "games"),
        ({"threads": 0}, "threads"),
    ],
)
def test_schema_refuses_a_test_split_and_bad_play_keys(play, named):
    import jsonschema
    import yaml

    from tests.helpers import ROOT

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    config = {
        "datasets": {"s": {"inputs": ["x.pgn"]}},
        "runs": {"r": {"dataset": "s", "play": play}},
    }
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    assert errors and named in (errors[0].message + str(list(errors[0].absolute_path)))
    good = {**config, "runs": {"r": {"dataset": "s", "play": {"elo": {"ladder": "full"}}}}}
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(good))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_split_dense_and_flex_scores_match_the_oracle():
    """On the GPU (BF16 autocast): the two-part, the dense and the FlexAttention (compiled)
    paths, and the two-part compiled (``match.compile``), agree with the oracle loop up to
    BF16 rounding."""
    torch.manual_seed(0)
    net = gpt.build("tiny", device="cuda").eval()
    moves = [list(g.mainline_moves())[:20] for g in sample_pgn_games(3)]
    batch = branched.build_batch([scorer_input(m) for m in moves], "cuda")
    dense = scoring.score(net, batch, attention="dense")
    two_part = scoring.score(net, batch, attention="split")
    assert torch.allclose(dense.move_logp, two_part.move_logp, atol=3e-2)
    scoring.compile_layers(net)
    flex = scoring.score(net, batch, attention="flex")
    assert torch.allclose(dense.move_logp, flex.move_logp, atol=3e-2)
    compiled = scoring.score(net, batch, attention="split")
    assert torch.allclose(two_part.move_logp, compiled.move_logp, atol=3e-2)
    oracle = oracle_scores(net, moves[0], {0, 7, 19})
    rows = np.nonzero(batch.ply_game == 0)[0]
    for ply, per_move in oracle.items():
        for scores in (dense, two_part):
            played = float(scores.played_logp[rows[ply]])
            assert played == pytest.approx(per_move[moves[0][ply]], abs=3e-2)


def test_move_matching_evaluates_every_validation_game_beyond_the_legality_subset(tmp_path, net):
    """A cache with legality tables for 7 of 20 validation games: ``games: None`` scores all 20,
    the 13 others with legal moves computed as the cache computes them (the same codes as a
    cache that stores all 20, and python-chess agrees); a bound picks evenly among all 20 and
    says so."""
    small, full = small_cache(tmp_path), small_cache(tmp_path, None)

    def evaluator(cache_dir, games, state):
        return cpu_evaluator(net, cache_dir, tmp_path / state, games=games)

    ev, stored = evaluator(small, None, "s1"), evaluator(full, None, "s2")
    assert ev.selected.tolist() == list(range(20))
    assert int((ev.ply_start < 0).sum()) == 13
    for g in range(20):
        mine, theirs = ev.game(g), stored.game(g)
        assert mine.codes.tolist() == theirs.codes.tolist(), g
        assert mine.counts.tolist() == theirs.counts.tolist(), g
    board = chess.Board()
    game = ev.game(1)  # not stored in the small cache
    for ply, triple in enumerate(np.asarray(ev.games[1][1:-1]).reshape(-1, 3).tolist()):
        codes = game.codes[game.counts[:ply].sum() : game.counts[: ply + 1].sum()]
        assert codes.tolist() == scoring.legal_codes(board).tolist(), ply
        board.push(tokens.decode_move(triple))
    assert ev.run(time.monotonic() + 300)
    assert sorted(set(ev.positions()["game"].tolist())) == list(range(20))
    assert ev.selection() == (
        "20 of 20 validation games; legal moves of 13 computed with python-chess (beyond the"
        " cache's 7 stored)"
    )
    bounded = evaluator(small, 4, "s3")
    assert bounded.selected.tolist() == [0, 5, 10, 15]
    assert bounded.selection().startswith("4 of 20 validation games (match.games = 4: evenly")


def test_games_prepared_by_worker_processes_score_as_the_serial_path(tmp_path, net):
    """With 3 threads on a CPU, 3 forked workers prepare the 13 games the cache stores no tables
    for, chunk by chunk: the same tables as in-process (the cache's: the test above) and the
    same positions and numbers as the serial path (1 thread); torch's threads are the job's
    again after it."""
    small = small_cache(tmp_path)
    serial, parallel = (cpu_evaluator(net, small, tmp_path / f"t{n}", chunk_games=4, threads=n)
                        for n in (1, 3))  # fmt: skip
    assert (serial.workers, parallel.workers) == (0, 3)
    ids = [g for g in range(20) if parallel.ply_start[g] < 0]
    with prepare.Preparer(parallel.workers) as prep:
        pending = prep.submit(ids, [np.asarray(parallel.games[g]) for g in ids])
        assert len(pending.futures) == 3 and not pending.games  # one task a worker, not here
        tables = pending.tables()
    for g in ids:
        mine, theirs = parallel.game(g, tables[g]), serial.game(g)
        assert mine.codes.tolist() == theirs.codes.tolist(), g
        assert mine.counts.tolist() == theirs.counts.tolist(), g
    before = torch.get_num_threads()
    pool = prepare.started(parallel.workers).pool  # the process's, forked once
    pids = sorted(pool._processes)
    assert serial.run(time.monotonic() + 300) and parallel.run(time.monotonic() + 300)
    assert torch.get_num_threads() == before
    assert sorted(prepare.started(parallel.workers).pool._processes) == pids  # no new forks
    other: list = []  # another thread's pool is its own: the shared one dies with main only
    worker = threading.Thread(target=lambda: other.append(prepare.started(parallel.workers)))
    worker.start()
    worker.join()
    assert other[0] is not prepare.started(parallel.workers)
    one, other = serial.positions(), parallel.positions()
    assert len(one["game"]) == serial.positions_total
    for key in matching.CHUNK_FIELDS:
        assert np.array_equal(one[key], other[key]), key


def test_the_first_chunk_in_pieces_scores_as_one_chunk(tmp_path, net, monkeypatch):
    """As on a GPU (workers preparing ahead), the first chunk is scored in pieces of
    ``prepare.FIRST_PIECES`` games and written once, whole: the same positions and numbers as
    the serial path; a budget stop after it resumes the rest."""
    small = small_cache(tmp_path)
    monkeypatch.setattr(prepare, "FIRST_PIECES", (2, 3))
    monkeypatch.setattr(prepare, "ahead", lambda device: 2)  # a GPU's, on this CPU
    serial, split = (cpu_evaluator(net, small, tmp_path / f"t{n}", threads=n) for n in (1, 3))
    parts = split._parts(list(range(len(split.chunks))))
    assert [(c, len(g), last) for c, g, last in parts][:4] == [
        (0, 2, False), (0, 3, False), (0, 3, True), (1, 8, True)]  # fmt: skip
    assert serial.run(time.monotonic() + 300)
    assert not split.run(time.monotonic() - 1)  # past its deadline: nothing scored
    assert split.positions_done == 0
    chunk0 = len(np.load(serial.chunk_path(0))["game"])
    assert split.run(time.monotonic() + 300)
    assert len(np.load(split.chunk_path(0))["game"]) == chunk0  # one file, every piece
    assert_same_positions(serial.positions(), split.positions())


def test_preparation_workers_die_with_a_job_killed_outright(tmp_path):
    """A job killed by SIGKILL (the OOM killer) takes its idle preparation workers with it:
    without ``prepare``'s death signal they would wait for tasks forever, handed to init."""
    import os
    import subprocess
    import sys

    script = (
        "import os, numpy as np\n"
        "from chesslm.scorer import prepare\n"
        "prep = prepare.started(1)\n"
        "prep.submit([0], [np.array([69, 70], dtype=np.uint8)]).tables()\n"
        "print(*[p.pid for p in prep.pool._processes.values()], flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    # the pid line only, then the job's end: a lingering worker holds the pipe open
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    (worker,) = map(int, job.stdout.readline().split())
    assert job.wait(timeout=60) == -9
    job.stdout.close()
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not os.path.exists(f"/proc/{worker}")
    if not gone:
        os.kill(worker, 9)
    assert gone, f"worker {worker} outlived its job"


def test_a_group_of_fewer_than_ten_games_has_no_interval():
    rows = positions_with_a_lone_game()
    by = {(r["protocol"], r["grouping"], r["group"]): r for r in rows}
    lone, rated = by[("all", "elo_bin", "2000")], by[("all", "elo_bin", "1500")]
    assert lone["games"] == 1 and lone["positions"] == 20 and lone["few_games"]
    assert lone["top3"] is not None
    assert all(lone[f"{s}_{e}"] is None for s in matching.STATS for e in ("low", "high"))
    assert rated["games"] == 12 and not rated["few_games"]
    assert rated["top1_low"] < rated["top1_high"]
    nine = positions_with_a_lone_game(n_rated=9)
    assert {r["group"]: r["few_games"] for r in nine if r["grouping"] == "elo_bin"} == {
        "1500": True, "2000": True}  # fmt: skip


def test_the_figure_draws_a_few_games_bin_hollow_without_an_interval():
    frame = pd.DataFrame([{"dataset": "sample", **r} for r in positions_with_a_lone_game()])
    fig = plots.match_figure(frame)
    ax = fig.axes[0]
    hollow = [ln for ln in ax.lines if ln.get_markerfacecolor() == "none" and len(ln.get_xdata())]
    assert len(hollow) == 2 * len(metrics.SHARES)  # each share metric, both protocols
    assert all(set(np.asarray(ln.get_xdata()) - 50) <= {1992, 2008} for ln in hollow)
    bars = [c for c in ax.collections if c.get_segments()]  # errorbar's vertical bars
    xs = {round(float(seg[0][0])) for c in bars for seg in c.get_segments()}
    assert xs == {1542, 1558}  # only the 1500 bin, both protocols (side by side)
    counts = {t.get_text(): t.get_color() for t in ax.texts}
    assert counts == {"12": "black", "1": "grey"}
    assert any("fewer than 10 games" in t.get_text() for t in ax.get_legend().get_texts())
