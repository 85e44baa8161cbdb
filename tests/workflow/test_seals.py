"""Every record a later stage trusts is sealed when written and checked before use
(``chesslm.seal``): the play records, a ladder, a score table, the export folder. A flipped
byte, a truncation, an edited number or a record from before seals is refused in one line
naming the file and the command that rebuilds it."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from chesslm import files, seal
from chesslm.compare import positions, scores
from chesslm.export import folder
from chesslm.ladder import round_robin as ladder
from chesslm.match import protocols
from chesslm.model.checkpoint import CheckpointError
from chesslm.record.counterfactual import read_counterfactual
from chesslm.record.play_files import FILES
from chesslm.record.play_records import READERS
from chesslm.record.reader import RecordError
from chesslm.report.play_section import markdown_section
from tests.conftest import STAGED_ARGS, StagedRun
from tests.helpers import first_games_pgn, model_checkpoint, snakemake
from tests.workflow.test_summary import elo_record, legality_record, match_record, match_row

FINITE = {"elo": 880.4, "low": 801.2, "high": 951.6}


def flip(path: Path, offset: int) -> None:
    """One bit of the byte at ``offset`` (negative: from the end) flipped, in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def refused(error: BaseException, path: Path, target: Path, rule: str) -> str:
    """``error``'s text, checked: one line naming ``path``, ending with the rebuild command."""
    text = str(error)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    assert text.endswith(f"rebuild with: snakemake --cores 2 {target} --forcerun {rule}"), text
    return text


def damage(path: Path, number: str, edited: str) -> dict[str, bytes]:
    """The ways a sealed JSON file at ``path`` goes wrong, each as the file's bytes: a flipped
    byte inside ``number`` (still JSON), ``number`` edited to ``edited``, a truncation, and the
    record as it was before seals (no seal)."""
    good = path.read_bytes()
    at = good.index(number.encode()) + len(number) - 1
    flip(path, at)
    flipped = path.read_bytes()
    record = json.loads(good)
    unsealed = {k: v for k, v in record.items() if k != seal.SEAL}
    return {
        "flipped": flipped,
        "edited": good.replace(number.encode(), edited.encode()),
        "truncated": good[: len(good) // 2],
        "unsealed": json.dumps(unsealed, indent=2).encode(),
    }


def test_each_play_record_refuses_a_flipped_byte_an_edit_a_truncation_and_no_seal(tmp_path):
    """As rule play writes them (``seal.write``), each record reads; damaged, it is refused by
    the one reader (the summary's and the model card's) before any number is used; a dangling
    link is refused too, and the summary's "not yet" names the real folder."""
    rows = [match_row("maia2", 0.1261), match_row("all", 0.2001)]
    written = {
        "move_match": (match_record(rows), "0.1261", "0.6261"),
        "elo": (elo_record(FINITE), "880.4", "890.4"),
        "legality": (legality_record(), "0.0417", "0.0017"),
        "counterfactual": ({"conditioned": False, "note": "not conditioned 12"}, "12", "13"),
    }
    for name, (record, number, edited) in written.items():
        path = tmp_path / FILES[name]
        seal.write(path, record)
        assert READERS[name](path) is not None
        for how, data in damage(path, number, edited).items():
            path.write_bytes(data)
            with pytest.raises(RecordError) as error:
                READERS[name](path)
            text = refused(error.value, path, path, "play")
            why = {"truncated": "not JSON", "unsealed": seal.UNSEALED}.get(how, seal.DAMAGED)
            assert why in text, (name, how, text)
        path.unlink()
    path.symlink_to(tmp_path / "gone")  # there but unreadable: refused, not taken as absent
    with pytest.raises(RecordError, match=r"counterfactual.json: missing; rebuild"):
        read_counterfactual(path)
    empty = tmp_path / "results/demo/play"
    empty.mkdir(parents=True)
    assert f"No play evaluation yet (`{empty}/` has no move-match.json)." in markdown_section(empty)


def test_a_ladder_with_an_edited_rating_or_no_seal_is_refused(tmp_path):
    """An edited anchor rating (1061 -> 1091 moved a model's Elo by 10 in silence; -> 9061
    failed inside the fit, naming no file) is refused before a rating is read."""
    path = tmp_path / "ladders/mini-0123456789ab/ladder.json"
    path.parent.mkdir(parents=True)
    ratings = {"random": {"elo": 1061.0}, "sf": {"elo": 1350, "fixed": True}}
    stored = {"format": ladder.FORMAT, "key": "k" * 64, "settings": {}, "engine": {},
              "games": [], "covariance": {"names": ["random"], "matrix": [[4.0]]},
              "ratings": ratings}  # fmt: skip
    ladder.write_ladder(path, stored)
    assert ladder.ladder_ratings(ladder.read_ladder(path)) == {"random": 1061.0, "sf": 1350.0}
    cases = damage(path, "1061", "1091")
    cases["far"] = cases["edited"].replace(b"1091", b"9061")
    for data in cases.values():
        path.write_bytes(data)
        with pytest.raises(ladder.LadderError) as error:
            ladder.read_ladder(path)
        refused(error.value, path, path, "ladder")


def score_table(out_dir: Path) -> dict:
    """A small score table (rule score's columns), written by rule score's writer."""
    out_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    n = 64
    columns = {"game": np.repeat(np.arange(8), 8), "ply": np.tile(np.arange(8, dtype=np.int16), 8),
               "mover_elo": np.full(n, 1500, np.int32), "opponent_elo": np.full(n, 1600, np.int32),
               "rank": rng.integers(0, 20, n).astype(np.int16), "nll": rng.random(n) * 3,
               "n_legal": np.full(n, 20, np.int16)}  # fmt: skip
    columns |= {scores.PROTOCOL_PREFIX + p: np.ones(n, bool) for p in protocols.PROTOCOLS}
    ids = np.array([f"g{i:04d}" for i in range(8)])
    return scores.write_table(out_dir, ids, columns, {"positions": n, "model": {"step": 3}})


def test_a_score_table_from_before_the_rank_column_is_refused_with_its_rebuild(tmp_path):
    """A table rule score wrote before it kept each position's rank (top1 and top3 columns
    instead): one line naming the file and the command that rebuilds it."""
    out_dir = tmp_path / "results" / "a" / "scores" / "mini"
    out_dir.mkdir(parents=True)
    n = 8
    columns = {"game": np.arange(n), "ply": np.zeros(n, np.int16),
               "mover_elo": np.full(n, 1500, np.int32), "opponent_elo": np.full(n, 1600, np.int32),
               "top1": np.ones(n, bool), "top3": np.ones(n, bool), "nll": np.ones(n),
               "n_legal": np.full(n, 20, np.int16)}  # fmt: skip
    columns |= {scores.PROTOCOL_PREFIX + p: np.ones(n, bool) for p in protocols.PROTOCOLS}
    scores.write_table(out_dir, np.array([f"g{i}" for i in range(n)]), columns, {"positions": n})
    with pytest.raises(ValueError) as refused:
        positions.load(out_dir)
    said = str(refused.value)
    assert "\n" not in said and str(out_dir / "positions.npz") in said
    assert "rebuild it: snakemake" in said and "--forcerun score" in said


def test_a_score_table_with_a_flipped_byte_or_an_edited_record_is_refused(tmp_path):
    """What rule compare reads: positions.npz only once it matches the sealed scores.json (a
    flipped byte used to surface as zipfile's CRC error, or as numpy's advice to unpickle)."""
    out = tmp_path / "results/a/scores/mini"
    score_table(out)
    record, table = out / "scores.json", out / "positions.npz"
    assert scores.read_record(out)["positions"] == 64 and len(positions.load(out)["game"]) == 64
    good = table.read_bytes()
    for offset in (60, len(good) // 2, -30):  # the first member's npy header, data, directory
        flip(table, offset)
        with pytest.raises(seal.SealError) as error:
            positions.load(out)
        assert "sha256 does not match" in refused(error.value, table, record, "score")
        table.write_bytes(good)
    table.write_bytes(good[:-100])
    with pytest.raises(seal.SealError, match="positions.npz: sha256 does not match"):
        positions.load(out)
    table.write_bytes(good)
    for data in damage(record, '"positions": 64', '"positions": 65').values():
        record.write_bytes(data)
        with pytest.raises(seal.SealError) as error:
            positions.load(out)
        refused(error.value, record, record, "score")


def export_of(checkpoint: Path, out: Path) -> Path:
    sources = {name: checkpoint.parent / f"{name}.json" for name in ("results", "manifest",
                                                                      "receipt")}  # fmt: skip
    for path in sources.values():
        files.write_json_atomic(path, {})
    folder.export(folder.Sources(run="seal", checkpoint=checkpoint, **sources), out)
    return out


@pytest.mark.parametrize("outcome", [False, True], ids=["plain", "outcome-head"])
def test_an_export_is_byte_identical_and_checked_by_sha256sum_and_the_engine(
    tmp_path, capsys, outcome: bool
):
    """Two exports of one best.pt (with the outcome head or without): the same bytes, file by
    file (safetensors' metadata in a hash map's order made them differ); SHA256SUMS, named in
    the card, passes coreutils' ``sha256sum -c``; with a data byte of the weights flipped
    (which transformers loads silently), sha256sum, chesslm-uci and chesslm-analyse refuse it,
    in one line."""
    from chesslm.engine import analyse, uci
    from chesslm.export.load import model_at

    ckpt = model_checkpoint(tmp_path / "best.pt", spread=0.1, outcome=outcome)
    first, second = export_of(ckpt, tmp_path / "a"), export_of(ckpt, tmp_path / "b")
    names = sorted(p.name for p in first.iterdir())
    # the heads' files only with their heads (this checkpoint has no time inputs)
    written = [name for key, name in folder.FILES.items()
               if (outcome or key != "outcome") and key != "human_time"]  # fmt: skip
    assert names == sorted(written) == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    weights = first / folder.FILES["weights"]
    assert f"`{files.sha256_file(weights)}`" in (first / "README.md").read_text()
    assert "sha256sum -c SHA256SUMS" in (first / "README.md").read_text()
    ok = subprocess.run(["sha256sum", "-c", seal.SUMS], cwd=first, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.count(": OK\n") == len(names) - 1, ok.stdout
    flip(weights, -5)  # a weight's byte: the header still parses, the tensors load
    bad = subprocess.run(["sha256sum", "-c", seal.SUMS], cwd=first, capture_output=True, text=True)
    assert bad.returncode == 1 and "model.safetensors: FAILED" in bad.stdout
    command = f"snakemake --cores 2 {weights} --forcerun export (or download it again)"
    with pytest.raises(CheckpointError) as error:
        model_at(first, "cpu")
    assert str(error.value) == (
        f"{weights}: sha256 does not match {first / seal.SUMS} (edited or damaged);"
        f" rebuild with: {command}"
    )
    pgn = tmp_path / "games.pgn"
    pgn.write_text(first_games_pgn(1))
    with pytest.raises(SystemExit) as exited:
        analyse.main(["--checkpoint", str(first), str(pgn), "--csv", str(tmp_path / "a.csv")])
    assert exited.value.code == 1
    assert capsys.readouterr().err == f"chesslm-analyse: {error.value}\n"
    threads = torch.get_num_threads()
    try:
        assert uci.main(["--checkpoint", str(first)]) == 1  # the console script's own main
    finally:
        torch.set_num_threads(threads)  # main sets one thread for the engine
    assert capsys.readouterr().err == f"chesslm-uci: {error.value}\n"


@pytest.mark.slow
def test_rule_summarise_refuses_an_edited_play_record_in_one_line(
    staged_run: StagedRun, tmp_path: Path
) -> None:
    """Real snakemake on a copy of the staged run: move-match.json with its top-1 edited (it
    was published outside its own interval) stops rule summarise with one line naming the file
    and the command that rebuilds it, which plans rule play."""
    wf = staged_run.copy(tmp_path / "wf")
    target = "results/mini/play/move-match.json"
    record = json.loads((wf / target).read_text())
    row = record["datasets"]["mini"]["table"][0]
    row["top1"] = row["top1"] + 0.5
    (wf / target).write_text(json.dumps(record, indent=2))
    done = snakemake(wf, "results/mini/report/summary.md", *STAGED_ARGS, "--cores", "1",
                     "--forcerun", "summarise", "--allowed-rules", "summarise",
                     check=False)  # fmt: skip
    console = done.stdout + done.stderr
    said = [line for line in console.splitlines() if seal.DAMAGED in line]
    assert done.returncode != 0 and len(said) == 1 and "Traceback" not in console, console[-3000:]
    # the run is defined in the second config file, which the printed command names
    command = f"snakemake --cores 2 {target} --configfile train-workflow.yaml --forcerun play"
    assert said[0].endswith(f"{target}: {seal.DAMAGED}; rebuild with: {command}"), said[0]
    plan = snakemake(wf, *shlex.split(command)[1:], "-n")  # as printed
    planned = plan.stdout + plan.stderr
    assert "rule play:" in planned and "rule summarise:" not in planned, planned[-3000:]
