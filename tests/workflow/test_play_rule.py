"""Rule play end to end in-process (chesslm.play): real games against a small Elo ladder's
anchors, the evaluation's files, records, resume after a budget stop, threads, the summary
section and the card (the fit itself: tests/unit/test_ladder.py)."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from chesslm import files, seal
from chesslm.data import metadata
from chesslm.data.cache import check_validation_only
from chesslm.export import card
from chesslm.ladder import elo
from chesslm.ladder import round_robin as ladder
from chesslm.match import matching
from chesslm.model import weights
from chesslm.play import elo_games, evaluate, plots, workstate
from chesslm.record import play_files as outputs
from chesslm.record.elo import NOT_PLAYED
from chesslm.record.play_records import READERS, Play, read_play
from chesslm.record.reader import RecordError
from chesslm.report.play_section import markdown_section
from chesslm.scorer.settings import PlaySettings
from chesslm.scorer.threads import use_threads
from tests.playkit import (
    SETTINGS,
    TINY_LADDER,
    positions_with_a_lone_game,
    run_dir_for,
    validation_plies,
)

typed = PlaySettings.from_dict  # rule play's script types the play settings so


def test_evaluation_writes_tables_figures_and_section_and_keeps_no_state(
    tmp_path, net, play_cache, caplog, tiny_ladder
):
    run_dir = run_dir_for(tmp_path, net)
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        out = evaluate.run(run_dir, typed(SETTINGS), {"sample": play_cache}, device="cpu",
                           progress_every=0, ladder=tiny_ladder)  # fmt: skip
    assert all(p.exists() for p in out.values())
    match = json.loads(out["move_match"].read_text())
    d = match["datasets"]["sample"]
    assert d["complete"] and d["games_evaluated"] == 20 and d["metadata"] == "present"
    assert d["positions"] == sum(len(g) for g in validation_plies(play_cache))
    table = pd.read_csv(out["move_match_table"])
    for protocol in ("maia2", "all"):
        part = table[table["protocol"] == protocol]
        overall = part[part["grouping"] == "overall"].iloc[0]
        for grouping in ("elo_bin", "band", "speed"):
            assert part[part["grouping"] == grouping]["positions"].sum() == overall["positions"]
        assert overall["top1_low"] <= overall["top1"] <= overall["top1_high"]
        assert overall["top1"] <= overall["top3"]
    maia = table[(table["protocol"] == "maia2") & (table["grouping"] == "overall")].iloc[0]
    assert maia["positions"] == d["protocol_positions"]["maia2"] < d["positions"]
    assert d["protocol_positions"]["all"] == d["positions"]
    assert set(table[table["grouping"] == "speed"]["group"]) <= set(metadata.SPEEDS)
    legality = json.loads(out["legality"].read_text())
    assert set(legality["modes"]) == {"greedy", "temperature_1"}
    result = json.loads(out["elo"].read_text())
    assert [a["games"] for a in result["anchors"]] == [2, 2, 2, 2]
    stored = ladder.read_ladder(tiny_ladder)
    assert result["ladder"]["file"] == str(tiny_ladder) and result["ladder"]["key"] == stored["key"]
    assert [a["rating"] for a in result["anchors"]] == [
        stored["ratings"][a.name]["elo"] for a in TINY_LADDER.anchors
    ]
    fit = result["fit"]  # draws at 16 plies: a score strictly between 0 and 1, so finite
    assert all(math.isfinite(fit[k]) for k in ("elo", "low", "high", "low_total", "high_total"))
    assert fit["low"] < fit["elo"] < fit["high"] and fit["bound"] is None
    assert "not a human" in result["note"]
    assert result["reproducible"] is False and "seed" in result["reproducibility"]
    assert result["random_anchors"] == ["stockfish-elo1350"]
    games_csv = pd.read_csv(out["elo_games"])
    assert len(games_csv) == 8 and set(games_csv["anchor"]) == {a.name for a in TINY_LADDER.anchors}
    section = markdown_section(run_dir / "play")
    for heading in ("## Play evaluation", "### Move-matching", "### Free-running legality",
                    "### Elo against Stockfish", "maia2", "1400-2000",
                    "**Not reproducible** in part: Stockfish", f"**{fit['elo']:.0f}**",
                    "| stockfish-elo1350 | stockfish_elo | 1350 (fixed: UCI_Elo) |",
                    stored["key"][:12]):  # fmt: skip
        assert heading in section, heading
    _card_and_report_agree(run_dir / "play", out, stored)
    # progress: every update logged (interval 0), the last with the whole count
    lines = [r.getMessage() for r in caplog.records if r.name == "chesslm.play"]
    total = d["positions"]
    assert f"move-matching sample: 0/{total} positions (0%)" in lines
    assert f"move-matching sample: {total}/{total} positions (100%)" in lines
    partial = [x for x in lines if re.fullmatch(rf"move-matching sample: \d+/{total} .*", x)]
    assert len(partial) > 3  # one per batch, not just start and end
    assert "free-running legality temperature_1: 2/2 games finished (100%); ply 8 of 8" in lines
    assert "free-running legality greedy: 1/1 games finished (100%); complete" in lines
    assert "games against the ladder's anchors: 8/8 games (100%); complete" in lines

    # a finished evaluation keeps no work in progress: a rerun measures afresh
    assert not (run_dir / "play/state").exists()


def _play_records(out: dict[str, Path]) -> Play:
    return read_play(out[name] for name in READERS)


def _card(play: Play) -> str:
    """The model card of a run that played (only its play records: the rest not recorded)."""
    return card.render(card.Facts("t", {}, {}, {}, {}, {}, play=play))


def _card_and_report_agree(play_dir: Path, out: dict[str, Path], stored: dict) -> None:
    """The card's Elo line is the report's (one reader), for a finite fit and for a bound;
    a record missing a key is one line naming the file and the key, in both."""
    play = _play_records(out)
    section, text = markdown_section(play_dir), _card(play)
    assert "not recorded at not recorded" not in text
    for line in (play.elo.sentence(), play.elo.ladder_sentence(),
                 play.elo.reproducibility_sentence()):  # fmt: skip
        assert line in section and line in text, line
    assert f"**{play.elo.fit.elo:.0f}** (95 % interval" in text
    record = json.loads(out["elo"].read_text())
    lost = [{"white": a, "black": elo_games.MODEL, "score": 1.0} for a in stored["ratings"]]
    record["fit"] = elo.fit_player(lost, ladder.ladder_ratings(stored), elo_games.MODEL)
    seal.write(out["elo"], record)
    play, section = _play_records(out), markdown_section(play_dir)
    assert play.elo.fit.bound == "below" and "Estimate not finite: below" in play.elo.sentence()
    assert play.elo.sentence() in section and play.elo.sentence() in _card(play)
    del record["fit"]["games"]
    seal.write(out["elo"], record)  # sealed as written, but not what the reader needs
    said = f"{out['elo']}: no key 'fit.games'"
    with pytest.raises(RecordError, match=re.escape(said)):
        _play_records(out)
    with pytest.raises(RecordError, match=re.escape(said)):
        markdown_section(play_dir)


def test_a_conditioned_model_is_scored_at_true_and_counterfactual_ratings(
    tmp_path, noisy, play_cache
):
    """The counterfactual part of an ``elo`` checkpoint: its true-rating setting is
    move-matching's numbers exactly (the same positions, each game's own prefix); a
    counterfactual setting's are an Evaluator's at those ratings; predictions move with the
    rating; the ratings the games were played at are recorded; the summary shows the table."""
    run_dir = run_dir_for(tmp_path, noisy, conditioning="elo")
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 8
    settings["ratings"] = {"self": 1900, "opponent": 1100}
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    assert record["conditioned"] and record["model"]["conditioning"] == "elo"
    assert record["datasets"]["sample"]["complete"]
    table = pd.read_csv(out["counterfactual_table"])
    overall = table[(table["grouping"] == "overall") & (table["protocol"] == "all")]
    assert overall["setting"].tolist() == ["true", "1100", "1900"]
    by = overall.set_index("setting")
    match = pd.read_csv(out["move_match_table"])
    m = match[(match["grouping"] == "overall") & (match["protocol"] == "all")].iloc[0]
    assert by.loc["true", "positions"] == m["positions"]
    for stat in ("top1", "top3", "nll"):
        assert by.loc["true", stat] == pytest.approx(m[stat], abs=1e-6), stat
    assert by.loc["true", "argmax_changed"] == 0 and by.loc["true", "tv"] == 0
    assert by.loc["1100", "tv"] > 1e-4 and by.loc["1900", "kl"] > 0
    ev = matching.Evaluator(weights.load_model(run_dir / "train/best.pt", "cpu"), play_cache,
                            tmp_path / "direct", games=8, chunk_games=8, batch_tokens=4096,
                            device=torch.device("cpu"), ratings=(1100, 1100))  # fmt: skip
    direct = ev.evaluate_games(ev.selected)
    assert by.loc["1100", "nll"] == pytest.approx(float(np.mean(direct["nll"])), abs=1e-5)
    assert by.loc["1100", "top1"] == pytest.approx(float(np.mean(direct["rank"] < 1)))
    legality = json.loads(out["legality"].read_text())
    assert legality["ratings"]["ratings"] == {"self": 1900, "opponent": 1100}
    assert legality["ratings"]["prefix_bins"] == {"self": "1900-1999", "opponent": "1100-1199"}
    section = markdown_section(run_dir / "play")
    assert "### Counterfactual ratings" in section and "| sample | all | 1900 |" in section


def test_a_model_without_conditioning_says_so_in_the_counterfactual_part(tmp_path, net, play_cache):
    run_dir = run_dir_for(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 2
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    assert record["conditioned"] is False and "not conditioned" in record["note"]
    assert out["counterfactual_table"].exists() and out["counterfactual_plot"].exists()
    assert json.loads(out["legality"].read_text())["ratings"]["ratings"] is None
    assert "not conditioned" in markdown_section(run_dir / "play")
    # games_per_anchor: 0 writes fit: null; the card and the report say so alike
    play = _play_records(out)
    assert json.loads(out["elo"].read_text())["fit"] is None and not play.elo.played
    assert f"Elo: {NOT_PLAYED}" in _card(play)
    assert NOT_PLAYED in markdown_section(run_dir / "play")


def test_a_broken_record_is_one_line_naming_its_file_and_key(tmp_path, net, play_cache):
    """Real records (the evaluation's), broken: a missing key, a wrong type (sealed, so that
    the reader gets to the keys), not JSON; the report and the card's reader both refuse it."""
    run_dir = run_dir_for(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 2
    settings["legality"]["games"] = 1
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    match = json.loads(out["move_match"].read_text())
    no_games, text_step = json.loads(json.dumps(match)), json.loads(json.dumps(match))
    del no_games["datasets"]["sample"]["table"][0]["games"]
    text_step["model"]["step"] = "7"
    cases = {"no key 'datasets.sample.table[0].games'": no_games,
             "key 'model.step' is \"7\", not an integer": text_step}  # fmt: skip
    for said, broken in cases.items():
        seal.write(out["move_match"], broken)
        with pytest.raises(RecordError, match=re.escape(f"{out['move_match']}: {said}")):
            _play_records(out)
        with pytest.raises(RecordError, match=re.escape(f"{out['move_match']}: {said}")):
            markdown_section(run_dir / "play")
    older = json.loads(json.dumps(match))  # written before the metric table had top-5
    for row in older["datasets"]["sample"]["table"]:
        for key in ("top5", "top5_low", "top5_high"):
            del row[key]
    seal.write(out["move_match"], older)
    assert _play_records(out).move_match.datasets["sample"].table[0].top5 is None  # readable
    assert "n/a" in markdown_section(run_dir / "play")
    seal.write(out["move_match"], match)
    out["legality"].write_text('{"modes": ')
    with pytest.raises(RecordError, match=re.escape(f"{out['legality']}: not JSON")):
        markdown_section(run_dir / "play")


def test_a_budget_stop_writes_partial_results_and_the_next_run_resumes_its_chunks(
    tmp_path, net, play_cache, caplog
):
    """Only a job stopped by its time budget leaves work for the next one (which may have a
    larger budget); the job that completes removes it, so a rerun re-measures every chunk."""
    run_dir = run_dir_for(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["chunk_games"] = 2
    settings["match"]["seconds"] = 0  # stop before the first chunk
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    d = json.loads(out["move_match"].read_text())["datasets"]["sample"]
    assert not d["complete"] and d["games_evaluated"] == 0
    assert "stopped by its time budget" in markdown_section(run_dir / "play")
    state = run_dir / "play/state"
    assert json.loads((state / workstate.STOPPED).read_text()) == {"parts": ["match"]}
    # two chunks "finished by an earlier job": the next one keeps them, computes the rest
    m = settings["match"]
    evaluator = matching.Evaluator(net, play_cache, state / "match/sample", games=m["games"],
                                   chunk_games=m["chunk_games"], batch_tokens=m["batch_tokens"],
                                   device=torch.device("cpu"),
                                   attention=m["attention"])  # fmt: skip
    for i in range(2):
        result = evaluator.evaluate_games(evaluator.chunks[i])
        files.write_atomic(evaluator.chunk_path(i), lambda fh, r=result: np.savez(fh, **r))
    settings["match"]["seconds"] = 600  # a larger budget: the same work, resumed
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    assert "resuming the work of a job stopped by its time budget" in caplog.text
    first = next(m for m in caplog.messages if m.startswith("move-matching sample: "))
    assert not first.startswith("move-matching sample: 0/"), first  # counted from the kept
    d = json.loads(out["move_match"].read_text())["datasets"]["sample"]
    assert d["complete"] and d["games_evaluated"] == d["games_selected"]
    assert not state.exists()  # complete: nothing left to resume
    full = pd.read_csv(out["move_match_table"])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        again = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    assert any(m.startswith("move-matching sample: 0/") for m in caplog.messages)
    assert pd.read_csv(again["move_match_table"]).equals(full)  # re-measured, same numbers


def test_missing_metadata_puts_positions_in_unknown_bins(tmp_path, net, play_cache):
    bare = tmp_path / "cache"
    shutil.copytree(play_cache, bare)
    info = json.loads((bare / "cache.json").read_text())
    for path in bare.glob("validation.meta.*.npy"):  # a cache built without them
        path.unlink()
        del info["sha256"][path.name]
    (bare / "cache.json").write_text(json.dumps(info))
    run_dir = run_dir_for(tmp_path, net)
    settings = {**SETTINGS, "elo": {**SETTINGS["elo"], "games_per_anchor": 0}}
    out = evaluate.run(run_dir, typed(settings), {"sample": bare}, device="cpu")
    table = pd.read_csv(out["move_match_table"], keep_default_na=False)
    assert set(table[table["grouping"] != "overall"]["group"]) == {"unknown"}


def test_a_test_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="validation splits only"):
        check_validation_only(tmp_path / "datasets" / "x" / "test")


# ------------------------------------------------------------- threads, progress, honesty


def test_evaluation_uses_exactly_the_threads_it_is_given(tmp_path, net, play_cache):
    """torch runs with the rule's threads, whatever the process had; each file records them
    (a change of threads keeps a budget-stopped job's work: workstate.identity's doctest)."""
    settings = json.loads(json.dumps(SETTINGS))
    settings["threads"] = 1  # the schema's key, as the rule passes it: not the one used
    settings["match"]["games"] = 4
    settings["legality"].update(games=1, max_plies=2)
    settings["elo"]["games_per_anchor"] = 0
    run_dir = run_dir_for(tmp_path, net)
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(3 - threads)  # the other value
            if threads == 2:
                evaluate.run(
                    run_dir,
                    PlaySettings.from_dict(settings),
                    {"sample": play_cache},
                    device="cpu",
                    threads=2,
                )
            else:  # the command line
                assert evaluate.main(["--run-dir", str(run_dir), "--settings",
                                      json.dumps(settings), "--cache", f"sample={play_cache}",
                                      "--threads", "1"]) == 0  # fmt: skip
            out = {k: run_dir / "play" / v for k, v in outputs.FILES.items()}
            assert torch.get_num_threads() == threads
            for key in ("move_match", "legality", "elo"):
                assert json.loads(out[key].read_text())["host"]["torch_threads"] == threads
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="play threads: 0"):
        use_threads(0)


def test_the_play_rule_asks_snakemake_for_the_configured_threads(tmp_path):
    """A dry run: the play job gets runs.NAME.play.threads, capped by --cores (1 by default:
    Snakemake then prints no threads line)."""
    from tests.helpers import ROOT
    from tests.helpers import snakemake as run_snakemake

    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config/config.yaml", tmp_path / "config/config.yaml")
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    (tmp_path / "t.yaml").write_text(
        "runs:\n  demo:\n    dataset: sample\n    play: {threads: 2}\n"
    )

    def play_job(*args: str) -> str:
        plan = run_snakemake(tmp_path, "results/demo/play/move-match.json", "-n", *args).stdout
        return plan[plan.index("rule play:") :].split("\n\n")[0]

    assert "threads: 2" in play_job("--cores", "2", "--configfile", "t.yaml")
    assert "threads:" not in play_job("--cores", "1", "--configfile", "t.yaml")
    assert "threads:" not in play_job("--cores", "2")


def test_the_elo_figure_places_the_model_on_the_ladders_scale():
    """Each anchor at its ladder rating with its interval, the model's fitted curve through
    0.5 at its Elo; a model with only losses: a dashed line at its upper bound."""
    ratings = {"random": 200.0, "sf1": 1600.0}
    placed = [{"anchor": n, "rating": r, "rating_low": r - 80, "rating_high": r + 80,
                "score": s, "games": 4} for (n, r), s in zip(ratings.items(), (0.75, 0.25),
                                                             strict=True)]  # fmt: skip
    rows = [{"white": "model", "black": a["anchor"], "score": s}
            for a in placed for s in ((1.0, 1.0, 1.0, 0.0) if a["score"] > 0.5
                                       else (1.0, 0.0, 0.0, 0.0))]  # fmt: skip
    fit = elo.fit_player(rows, ratings)
    ax = plots.elo_figure(placed, fit).axes[0]
    assert "not reproducible" in ax.get_title() and "ladder" in ax.get_xlabel()
    points = next(ln for ln in ax.lines if ln.get_linestyle() == "None")
    assert list(points.get_xdata()) == [200.0, 1600.0]
    curve = next(ln for ln in ax.lines if ln.get_label().startswith("model:"))
    x, y = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
    assert np.interp(0.5, y[::-1], x[::-1]) == pytest.approx(fit["elo"], abs=15)
    lost = elo.fit_player([{**r, "score": 0.0} for r in rows], ratings)
    bound = plots.elo_figure(placed, lost).axes[0]
    assert any(
        ln.get_xdata()[0] == lost["high"] for ln in bound.lines if ln.get_linestyle() == "--"
    )


def test_the_section_says_which_intervals_are_missing_and_that_elo_is_not_reproducible(
    tmp_path,
):
    rows = [r for r in positions_with_a_lone_game() if r["grouping"] != "elo_bin"]
    rows.append({**rows[-1], "grouping": "band", "group": "2000-2400", "games": 1,
                 "few_games": True, "top1_low": None, "top1_high": None})  # fmt: skip
    match = {
        "model": {"checkpoint": "best.pt", "step": 1, "preset": "tiny"},
        "definition": "argmax", "protocols": {"maia2": "m", "all": "every"},
        "interval": "bootstrap", "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "datasets": {"sample": {"complete": True, "games_evaluated": 13, "validation_games": 13,
                                "games_selected": 13, "selection": "13 of 13 validation games",
                                "positions": 260, "protocol_positions": {"maia2": 130, "all": 260},
                                "metadata": "present",
                                "table": rows}},
    }  # fmt: skip
    seal.write(tmp_path / "move-match.json", match)
    section = markdown_section(tmp_path)
    band = next(line for line in section.splitlines() if "| 2000-2400 |" in line)
    assert "(no interval)" in band and "[" not in band
    assert "No interval: fewer than 10 games" in section
    overall = next(line for line in section.splitlines() if "| overall | all |" in line)
    assert "[" in overall  # 13 games: its interval is shown


def test_the_section_says_n_of_m_games_and_why_when_fewer_than_all(tmp_path):
    rows = [r for r in positions_with_a_lone_game() if r["grouping"] == "overall"]
    ds = {"complete": True, "games_evaluated": 13, "validation_games": 13, "games_selected": 13,
          "selection": "13 of 13 validation games", "positions": 260, "metadata": "present",
          "protocol_positions": {"maia2": 130, "all": 260}, "table": rows}  # fmt: skip
    match = {
        "model": {"checkpoint": "best.pt", "step": 1, "preset": "tiny"},
        "definition": "argmax", "protocols": {"maia2": "Maia-2's rule", "all": "every"},
        "interval": "bootstrap", "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "datasets": {"all": ds, "some": {**ds, "games_evaluated": 4, "games_selected": 4,
                     "selection": "4 of 13 validation games (match.games = 4: evenly spaced)"}},
    }  # fmt: skip
    seal.write(tmp_path / "move-match.json", match)
    lines = markdown_section(tmp_path).splitlines()
    every = next(line for line in lines if line.startswith("Dataset `all`"))
    assert "13 of 13 validation games (complete)," in every and "selected" not in every
    some = next(line for line in lines if line.startswith("Dataset `some`"))
    assert "4 of 13 validation games (complete; selected: 4 of 13" in some
    assert "match.games = 4" in some and "130 under maia2, 260 under all" in some
    assert "**maia2**: Maia-2's rule" in "\n".join(lines)
