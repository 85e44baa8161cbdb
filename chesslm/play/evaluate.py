"""The play evaluation of a run's best checkpoint: move-matching, free-running legality and
Elo against Stockfish, each written as soon as it completes, within its time budget.

    python -m chesslm.play.evaluate --run-dir results/demo --settings '{...}' \
        --cache sample=results/datasets/sample/token-cache

``settings`` is the run's ``play`` object of the config (schema defaults applied). The
evaluation reads validation splits only; a path to a test split is refused. Work in progress
lives in ``{run_dir}/play/state``: finished move-matching chunks and finished engine games are
kept and reused when the rule runs again with the same checkpoint and settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import chess.engine
import numpy as np
import pandas as pd
import torch

from chesslm import files
from chesslm.data.cache import TokenCache
from chesslm.play import elo, games, matching, plots
from chesslm.report.plots import save_svg
from chesslm.train import checkpoint
from chesslm.train import model as gpt

logger = logging.getLogger(__name__)

OUTPUTS = {
    "move_match": "move-match.json",
    "move_match_table": "move-match.csv",
    "legality": "legality.json",
    "legality_table": "legality.csv",
    "elo": "elo.json",
    "elo_table": "elo.csv",
    "elo_games": "elo-games.csv",
    "move_match_plot": "move-match.svg",
    "legality_plot": "legality.svg",
    "elo_plot": "elo.svg",
}
ELO_NOTE = (
    "engine Elo on Stockfish's UCI_Elo calibration (CCRL Blitz, 120+1 s, anchored to the Stash"
    " engine, about +-100 Elo), not a human (Lichess) rating"
)


def load_model(path: Path, device: torch.device) -> tuple[gpt.GPT, dict[str, Any]]:
    payload = checkpoint.load(path)
    preset = payload["identity"]["model"]["preset"]
    net = gpt.build(preset, device=device)
    net.load_state_dict(payload["model"])
    net.eval()
    info = {
        "checkpoint": str(path),
        "checkpoint_sha256": files.sha256_file(path),
        "preset": preset,
        "step": payload["cursor"]["step"],
        "best_nll": payload["metrics"].get("best_nll"),
    }
    return net, info


def check_validation_only(cache_dir: Path) -> None:
    """Refuse anything but a token cache (which holds train and validation only)."""
    if "test" in cache_dir.parts or not (cache_dir / "cache.json").exists():
        raise ValueError(f"{cache_dir}: not a token cache (play reads validation splits only)")


def _state(play_dir: Path, identity: dict[str, Any]) -> Path:
    """The work-in-progress directory, emptied when the checkpoint or settings changed."""
    state = play_dir / "state"
    marker = state / "identity.json"
    if state.exists():
        try:
            same = files.read_json(marker) == identity
        except (OSError, ValueError):
            same = False
        if not same:
            logger.info("%s: checkpoint or settings changed; starting over", state)
            shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        files.write_json_atomic(marker, identity)
    return state


def run(
    run_dir: Path,
    settings: dict[str, Any],
    caches: dict[str, Path],
    *,
    device: str,
    checkpoint_path: Path | None = None,
) -> dict[str, Path]:
    """Evaluate ``run_dir``'s best.pt; returns the paths written (``OUTPUTS`` keys)."""
    dev = torch.device(device)
    torch.manual_seed(settings["seed"])
    ckpt = checkpoint_path or run_dir / "train" / "best.pt"
    net, model_info = load_model(ckpt, dev)
    if settings["match"]["compile"]:
        for block in net.transformer.h:  # dynamic: every batch has its own (rows, length)
            block.compile(dynamic=True)
    play_dir = run_dir / "play"
    play_dir.mkdir(parents=True, exist_ok=True)
    out = {k: play_dir / v for k, v in OUTPUTS.items()}
    identity = {
        "checkpoint_sha256": model_info["checkpoint_sha256"],
        "settings": settings,
        "caches": {k: str(v) for k, v in caches.items()},
        "device": device,
    }
    state = _state(play_dir, identity)
    for cache_dir in caches.values():
        check_validation_only(cache_dir)

    # 1. move-matching
    m = settings["match"]
    protocol = matching.Protocol(m["skip_plies"], m["min_clock_seconds"])
    started = time.monotonic()
    deadline = started + m["seconds"]
    per_dataset: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, cache_dir in caches.items():
        evaluator = matching.Evaluator(
            net,
            cache_dir,
            state / "match" / name,
            games=m["games"],
            chunk_games=m["chunk_games"],
            batch_tokens=m["batch_tokens"],
            device=dev,
            attention=m["attention"],
        )
        t0 = time.monotonic()
        complete = evaluator.run(deadline)
        seconds = time.monotonic() - t0
        pos = evaluator.positions()
        meta, meta_state = matching.load_metadata(cache_dir, evaluator.games.offsets)
        table = matching.tables(
            pos, meta, protocol, replicates=m["bootstrap"], seed=settings["seed"]
        )
        features = matching.position_features(pos, meta)
        per_dataset[name] = {
            "cache": str(cache_dir),
            "validation_games": len(evaluator.games),
            "games_selected": int(len(evaluator.selected)),
            "games_evaluated": int(len(np.unique(pos["game"]))),
            "complete": complete,
            "metadata": meta_state,
            "seconds_this_run": seconds,
            **matching.counts(pos, features, protocol),
            "table": table,
        }
        rows += [{"dataset": name, **r} for r in table]
    match_json = {
        "model": model_info,
        "definition": "model move = argmax over legal moves of P(source) P(destination|source)"
        " P(promotion|source,destination), each renormalised over the legal tokens of its step;"
        " NLL = -log of the played move's probability under it",
        "protocols": {"maia": protocol.describe(), "all": "every position"},
        "bins": "mover's Elo: 100-point bins (label = lower edge) and bands <1400, 1400-2000,"
        " 2000-2400, 2400+; speed: Lichess classes; 'unknown' where metadata is missing",
        "interval": f"95 % percentile bootstrap over games, {m['bootstrap']} replicates",
        "split": "validation",
        "datasets": per_dataset,
    }
    logger.info("move-matching: %.1f s", time.monotonic() - started)
    files.write_json_atomic(out["move_match"], match_json)
    _write_csv(out["move_match_table"], pd.DataFrame(rows))
    save_svg(plots.match_figure(pd.DataFrame(rows)), out["move_match_plot"])

    # 2. free-running legality
    lg = settings["legality"]
    legality_json: dict[str, Any] = {"model": model_info, "modes": {}}
    cached = state / "legality.json"
    done = files.read_json(cached)["modes"] if cached.exists() else {}
    started = time.monotonic()
    deadline = started + lg["seconds"]
    for mode, temperature in (("greedy", 0.0), ("temperature_1", 1.0)):
        if mode in done and done[mode]["complete"]:
            legality_json["modes"][mode] = done[mode]
            continue
        legality_json["modes"][mode] = games.self_play(
            net,
            games=lg["games"],
            max_plies=lg["max_plies"],
            temperature=temperature,
            seed=settings["seed"],
            deadline=deadline,
        )
        files.write_json_atomic(cached, legality_json)
    legality_json["protocol"] = (
        "self-play from the start position, no legality mask (grammar only: squares, squares,"
        " promotion token); an illegal proposal is counted and replaced by the model's best legal"
        " move (sampled at temperature 1); python-chess judges; greedy games from one start are"
        " identical, so one greedy game is played"
    )
    logger.info("free-running legality: %.1f s", time.monotonic() - started)
    files.write_json_atomic(out["legality"], legality_json)
    leg_rows = [
        {"mode": mode, **b} for mode, r in legality_json["modes"].items() for b in r["buckets"]
    ]
    _write_csv(out["legality_table"], pd.DataFrame(leg_rows))
    save_svg(plots.legality_figure(pd.DataFrame(leg_rows)), out["legality_plot"])

    # 3. Elo against Stockfish
    e = settings["elo"]
    games_file = state / "elo-games.json"
    records: dict[str, dict[str, Any]] = (
        {r["key"]: r for r in files.read_json(games_file)["games"]} if games_file.exists() else {}
    )
    info: dict[str, Any] = {"complete": True}
    started = time.monotonic()
    if e["games_per_anchor"] > 0:
        if e["nodes"] is None and e["move_seconds"] is None:
            raise ValueError("play.elo: nodes and move_seconds are both null (the engine would"
                             " never stop); set one")  # fmt: skip
        first = next(iter(caches.values()))
        val = TokenCache(first).validation
        openings = games.openings_from(
            (val[int(i)] for i in matching.evenly_spaced(len(val), 4 * e["games_per_anchor"])),
            e["opening_plies"],
        )
        if not openings:
            raise ValueError(
                f"{first}: no validation game has play.elo.opening_plies={e['opening_plies']} plies"
            )
        limit = chess.engine.Limit(nodes=e["nodes"], time=e["move_seconds"])

        def keep(record: dict[str, Any]) -> None:
            records[record["key"]] = record
            files.write_json_atomic(games_file, {"games": list(records.values())})

        info = games.play_engine_games(
            net,
            engine_path=games.find_engine(e["engine"]),
            anchors=e["anchors"],
            games_per_anchor=e["games_per_anchor"],
            openings=openings,
            limit=limit,
            max_plies=e["max_plies"],
            deadline=time.monotonic() + e["seconds"],
            done=records,
            on_result=keep,
        )
    logger.info("games against Stockfish: %.1f s", time.monotonic() - started)
    played = list(records.values())
    fit = elo.fit([(r["anchor_effective"], r["score"]) for r in played])
    per_anchor = []
    for anchor in e["anchors"]:
        mine = [r for r in played if r["anchor"] == anchor]
        if mine:
            per_anchor.append({
                "anchor": anchor,
                "anchor_effective": mine[0]["anchor_effective"],
                "games": len(mine),
                "wins": sum(r["score"] == 1 for r in mine),
                "draws": sum(r["score"] == 0.5 for r in mine),
                "losses": sum(r["score"] == 0 for r in mine),
                "score": sum(r["score"] for r in mine) / len(mine),
                "adjudicated_draws": sum(r["adjudicated_draw"] for r in mine),
            })  # fmt: skip
    elo_json = {
        "model": model_info,
        "fit": fit,
        "anchors": per_anchor,
        "note": ELO_NOTE,
        "engine": {k: v for k, v in info.items() if k != "complete"},
        "complete": info.get("complete", True),
        "limit": {"nodes": e["nodes"], "move_seconds": e["move_seconds"]},
        "protocol": f"openings: the first {e['opening_plies']} plies of evenly spaced validation"
        f" games, each played with both colours; the model plays its best legal move; games"
        f" longer than {e['max_plies']} plies are adjudicated draws",
    }
    files.write_json_atomic(out["elo"], elo_json)
    _write_csv(out["elo_table"], pd.DataFrame(per_anchor))
    _write_csv(out["elo_games"], pd.DataFrame(played).drop(columns=["key"], errors="ignore"))
    save_svg(plots.elo_figure(per_anchor, fit), out["elo_plot"])
    return out


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    files.write_atomic(path, lambda fh: fh.write(frame.to_csv(index=False).encode()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="the run's play object as JSON")
    parser.add_argument("--cache", action="append", required=True, help="NAME=TOKEN_CACHE_DIR")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    caches = dict(c.split("=", 1) for c in args.cache)
    run(
        args.run_dir,
        json.loads(args.settings),
        {k: Path(v) for k, v in caches.items()},
        device=args.device,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
