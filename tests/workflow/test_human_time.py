"""Human time in training (``runs.NAME.time_inputs``, ``runs.NAME.think_time``): Lichess's clock
rule on the sample's real clocked games, inputs that never reveal what a position predicts,
the think-time head's targets, loss and validation, the graphs path, the probe, the identity,
and two-rank gloo runs with every input and head (the rating prefix and the outcome head too)
that resume bitwise, padded and packed. Without the settings training
is the commit before, bit for bit: tests/workflow/test_human_time_off.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from chesslm.data import clocks, conditioning, convert, gamearrays, metadata, split, tokens
from chesslm.data.cache import TokenCache
from chesslm.data.settings import Settings
from chesslm.model import gpt, human_time, weights
from chesslm.model.presets import BASELINE_PARAMETERS, GPTConfig
from chesslm.train import batching, validation
from chesslm.train.human_time import GameTimes
from chesslm.train.loss import IGNORE
from chesslm.train.prefix import Prefixes
from chesslm.train.settings import RunSettings
from tests.conftest import (
    BOTH_LAYOUTS,
    RESUME_HYPER,
    SAMPLE,
    first_half,
    resumed_beside_whole,
    run_segment,
    segment_args,
)
from tests.helpers import assert_same_gradients, graphs_beside_default

# ------------------------------------------------------------------ the clock rule, real games


@pytest.fixture(scope="module")
def sample_clocks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """Every sample game's clock and time-control columns, as the converter wrote them."""
    out = tmp_path_factory.mktemp("sample")
    manifest = convert.convert([SAMPLE], out, Settings(), workers=2)
    parts: dict[str, list[np.ndarray]] = {"clock": [], "plies": [], "base": [], "inc": []}
    for name in split.SPLITS:
        for prefix in manifest["shards"][name]:
            games = gamearrays.Games(out / prefix)
            meta = metadata.Metadata(out / prefix, games.offsets)
            parts["clock"].append(np.asarray(meta["clock"]))
            parts["plies"].append(np.diff(metadata.ply_offsets(games.offsets)))
            parts["base"].append(np.asarray(meta["base_seconds"]))
            parts["inc"].append(np.asarray(meta["increment_seconds"]))
    columns = {k: np.concatenate(v) for k, v in parts.items()}
    columns["offsets"] = np.concatenate([[0], np.cumsum(columns.pop("plies"))])
    return columns


def test_the_clock_rule_holds_on_the_samples_real_clocked_games(sample_clocks: dict) -> None:
    c, offsets = sample_clocks["clock"], sample_clocks["offsets"]
    base, inc = sample_clocks["base"], sample_clocks["inc"]
    at = clocks.Plies.of(offsets)
    took = clocks.spent_plies(c, offsets, base, inc)
    known = ~np.isnan(took)
    clocked = np.fmax.reduceat(c, offsets[:-1]) >= 0
    assert clocked.sum() == 2336  # the sample's clocked games (shared/notes: 49.1 %)
    # never a negative time; none on either side's first move (the clock is not running)
    assert (took[known] >= 0).all() and not known[at.index < 2].any()
    # the last move of an increment game may have stopped the clock before the increment
    last = at.index == at.plies[at.game] - 1
    assert not known[last & (inc[at.game] > 0)].any()
    # the first moves cost nothing: the reading after each side's first move is its starting
    # time (berserk: less half the base) in all but a handful of the clocked games
    start = clocks.start_seconds(base, inc)
    first = [offsets[:-1] + side for side in (0, 1)]
    agree = 0
    games = np.flatnonzero(clocked & (np.diff(offsets) >= 2))
    for g in games:
        readings = c[[first[0][g], first[1][g]]]
        agree += np.all(np.isin(readings, [start[g], start[g] - base[g] / 2]))
    assert agree / len(games) > 0.99, (agree, len(games))
    # a negative difference (time given by the opponent) is rare: the rule leaves it unknown
    raw = np.full(len(c), np.nan)
    raw[2:] = c[:-2] - c[2:] + inc[at.game][2:]
    timed = (at.index >= 2) & (c >= 0) & (np.roll(c, 2) >= 0)
    assert 0 < (raw[timed] < 0).sum() < 1e-3 * timed.sum()
    # bullet moves are quicker than blitz moves, which are quicker than rapid ones
    pairs = zip(base, inc, strict=True)
    speed = np.array([metadata.speed_class(b, i) if b >= 0 else "" for b, i in pairs])
    medians = [np.median(took[known & (speed[at.game] == s)]) for s in ("bullet", "blitz", "rapid")]
    assert medians == sorted(medians) and medians[0] < medians[-1], medians


def test_berserk_takes_the_increment_away() -> None:
    # 180+2, White berserk (starts with 90 s): White's moves add no increment, Black's do
    c = np.array([90.0, 180, 85, 179, 84, 176])
    assert clocks.spent(c, base=180, increment=2).tolist()[2:5] == [5.0, 3.0, 1.0]
    # without berserk White's 5 s would have been 7 s
    assert clocks.spent(c + [90, 0] * 3, base=180, increment=2).tolist()[2] == 7.0
    # 0+2 starts with 3 s (Clock.Config.initTime); an unreadable time control knows nothing
    assert clocks.start_seconds(0, 2) == 3 and np.isnan(clocks.start_seconds(-1, -1))


# ------------------------------------------------------------------ inputs never tell the move


def test_no_time_input_at_a_position_reveals_what_is_predicted_there(sample_clocks: dict) -> None:
    """Changing every reading from ply k on changes no time input at positions 0..k (ply k's
    position, where its source and think time are predicted, and the destination and
    promotion predictions after it see nothing newer), and does change ply k + 1's."""
    c, offsets = sample_clocks["clock"], sample_clocks["offsets"]
    rng = np.random.default_rng(48)
    changed = 0
    for g in np.flatnonzero(np.fmax.reduceat(c, offsets[:-1]) >= 0)[:200]:
        clock = c[offsets[g] : offsets[g + 1]].astype(np.float64)
        control = {"base": int(sample_clocks["base"][g]), "increment": int(sample_clocks["inc"][g])}
        rows = human_time.features(clock, **control)
        for k in range(len(clock)):
            other = clock.copy()
            other[k:] = rng.uniform(0, 3 * max(clock.max(), 1), len(clock) - k)
            moved = human_time.features(other, **control)
            assert (moved[: k + 1] == rows[: k + 1]).all(), (g, k)
            changed += bool((moved[k + 1] != rows[k + 1]).any())
    assert changed > 0


@BOTH_LAYOUTS
def test_the_model_sees_no_clock_after_the_ply_it_predicts(
    clocked_cache: Path, flags: list[str]
) -> None:
    """End to end (batch rows -> model): every output of ply k's predictions (source,
    destination, promotion, think time) is unchanged when the readings after ply k change."""
    cache = TokenCache(clocked_cache)
    times = GameTimes.of_cache(cache, "train")
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=True, conditioning="elo").eval()
    prefixes = Prefixes.of_cache(cache, "train", "elo")
    games = [1, 2, 3]
    k = 6  # the ply whose readings on change (every one of these games has 20 plies or more)
    packed = "--packing=on" in flags

    def outputs(t: GameTimes) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        if packed:
            x, y, pos, doc = batching.collate_packed(
                cache.train, [games], "cpu", row_tokens=1024, prefixes=[prefixes(games)]
            )
            forward = {"pos": pos, "mask": batching.document_mask(doc)}
            starts = [int(s) for s in torch.nonzero(pos[0] == 0).flatten()][: len(games)]
            kw = {"prefix": 2, "packed": True}
            rows = t.rows(cache.train, [games], tuple(x.shape), **kw)
        else:
            x, y = batching.collate(
                [cache.train[i] for i in games], "cpu", prefixes=prefixes(games)
            )
            forward, starts = {}, [0] * len(games)
            rows = t.rows(cache.train, games, tuple(x.shape), prefix=2)
        with torch.no_grad():
            logits, think = net(x, time=rows, think_time=True, **forward)
        return logits, think, starts

    before = outputs(times)
    clock = np.array(times.clock, dtype=np.float32)
    for g in games:
        first = int(times.ply_offsets[g])
        clock[first + k : times.ply_offsets[g + 1]] += 7.0
    after = outputs(GameTimes(clock, times.ply_offsets, times.base, times.increment))
    for r, (g, start) in enumerate(zip(games, before[2], strict=True)):
        row = 0 if packed else r
        seen = start + 2 + 3 * k + 3  # ply k's last prediction is at its position + 2
        for a, b in zip(before[:2], after[:2], strict=True):
            assert torch.equal(a[row, start:seen], b[row, start:seen]), (g, packed)
        assert not torch.equal(before[0][row, seen], after[0][row, seen])  # ply k + 1 sees it


# ------------------------------------------------------------------ the head's targets and loss


def test_think_targets_sit_at_each_position_and_say_the_time_spent(clocked_cache: Path) -> None:
    cache = TokenCache(clocked_cache)
    times = GameTimes.of_cache(cache, "train")
    order = list(range(len(cache.train)))
    x, y = batching.collate([cache.train[i] for i in order], "cpu")
    t = times.targets(cache.train, order, tuple(y.shape), prefix=0)
    rows = times.rows(cache.train, order, tuple(y.shape), prefix=0)
    counted = 0
    for r, i in enumerate(order):
        clock, base, inc = times.game_clock(i)
        n = len(clock)
        for k in range(n + 1):
            assert x[r, 3 * k] == (tokens.BOS if k == 0 else cache.train[i][3 * k])
            # the oracle: the mover's previous reading less this one, plus the increment
            want = IGNORE
            if 2 <= k < n - (inc > 0) and clock[k - 2] >= 0 and clock[k] >= 0:
                took = clock[k - 2] - clock[k] + inc
                want = human_time.seconds_bin(took) if took >= 0 else IGNORE
            assert t[r, 3 * k] == want, (i, k)
            counted += want != IGNORE
            assert (rows[r, 3 * k] != human_time.NONE).all()
            if k < n:
                assert (t[r, 3 * k + 1 : 3 * k + 3] == IGNORE).all()
                assert (rows[r, 3 * k + 1 : 3 * k + 3] == human_time.NONE).all()
    assert counted == times.count(cache.train, order, False) > 0
    # a game without readings: every clock unknown but the starting times before ply 0
    unclocked = next(i for i in order if (times.game_clock(i)[0] < 0).all())
    values = rows[unclocked, 3 : 3 * (len(times.game_clock(unclocked)[0]) + 1) : 3]
    mover = 1 + 2 * human_time.VALUES  # the mover's feature, unknown
    assert (values[2:, 2] == mover).all() and (t[unclocked] == IGNORE).all()


def test_the_loss_is_the_game_by_game_cross_entropy(clocked_cache: Path) -> None:
    cache = TokenCache(clocked_cache)
    games, times = cache.train, GameTimes.of_cache(cache, "train", weight=0.5)
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=True)
    group = [[0, 1], [2, 3, 4]]
    values = batching.backward_group(
        net, games, group, micro=3, rank=0, world=1, device="cpu", times=times
    )
    moves = think = 0.0
    counted = 0
    for i in range(5):
        full = torch.tensor(games[i], dtype=torch.long)
        shape = (1, len(full) - 1)
        rows = times.rows(games, [i], shape, prefix=0)
        logits, heads = net(full[None, :-1], time=rows, think_time=True)
        moves += F.cross_entropy(logits[0], full[1:], reduction="sum").item()
        t = times.targets(games, [i], shape, prefix=0)[0]
        think += F.cross_entropy(heads[0], t, ignore_index=IGNORE, reduction="sum").item()
        counted += int(t.ne(IGNORE).sum())
    assert values["loss_sum"] == pytest.approx(moves, rel=1e-5)
    assert values["think_time_loss_sum"] == pytest.approx(think, rel=1e-5)
    assert values["think_time_targets"] == counted > 0
    assert net.think_head.weight.grad.abs().sum() > 0
    assert net.time_embedding.weight.grad[human_time.NONE].abs().sum() == 0  # row 0 stays 0
    assert net.time_embedding.weight.grad.abs().sum() > 0


def test_the_graphs_path_keeps_the_time_rows_and_the_think_gradient(clocked_cache: Path) -> None:
    """``cuda_graphs.MicrobatchGraphs`` (uncaptured on the CPU: the same static buffers)
    against the default path, padded games and packed rows, with every head."""
    from chesslm.train.outcome import Outcomes

    cache = TokenCache(clocked_cache)
    games = cache.train
    times = GameTimes.of_cache(cache, "train", weight=0.3)
    outcomes = Outcomes.of_cache(cache, "train", 0.2)
    model = {"outcome": True, "time_inputs": True, "think_time": True}
    for a, values, b, sb in graphs_beside_default(games, model, outcomes=outcomes, times=times):
        sa = list(values.values())
        assert sb[5] == pytest.approx(sa[5], rel=1e-5) and sb[6] == sa[6] > 0
        assert_same_gradients(a, b)


def test_validation_reports_the_think_time_nll_and_the_frequency_baseline(
    clocked_cache: Path,
) -> None:
    cache = TokenCache(clocked_cache)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=True)
    data = validation.ValidationSet(
        cache, cpu, legality_games=None, time_inputs=True, think_time=True
    )
    result = validation.evaluate(net, data)
    record = result["think_time"]
    times = GameTimes.of_cache(cache, "validation")
    total = counted = 0.0
    for i in range(len(cache.validation)):
        full = torch.tensor(cache.validation[i], dtype=torch.long)
        shape = (1, len(full) - 1)
        with torch.no_grad():
            _, heads = net(
                full[None, :-1], time=times.rows(cache.validation, [i], shape, prefix=0),
                think_time=True,
            )  # fmt: skip
        t = times.targets(cache.validation, [i], shape, prefix=0)[0]
        total += F.cross_entropy(heads[0], t, ignore_index=IGNORE, reduction="sum").item()
        counted += int(t.ne(IGNORE).sum())
    assert record["targets"] == counted > 0
    assert record["nll"] == pytest.approx(total / counted, rel=1e-5)
    assert len(record["bins"]) == human_time.BINS and record["games"] == 4  # two unclocked
    train = GameTimes.of_cache(cache, "train")
    counts = np.zeros(human_time.BINS)
    for i in range(len(cache.train)):
        tt = train.think_targets(i)
        counts += np.bincount(tt[tt >= 0], minlength=human_time.BINS)
    p = (counts + 1) / (counts + 1).sum()
    nll = -sum(
        np.log(p[b]) for i in range(len(cache.validation)) for b in times.think_targets(i) if b >= 0
    )
    assert record["baseline_nll"] == pytest.approx(nll / counted, rel=1e-9)


# ------------------------------------------------------------------ model, settings, identity


def test_without_them_the_model_and_its_records_are_todays() -> None:
    torch.manual_seed(0)
    plain = gpt.build("tiny", outcome=True)
    torch.manual_seed(0)
    timed = gpt.build("tiny", outcome=True, time_inputs=True, think_time=True)
    # created last: the trunk's and the outcome head's draws are those of a model without them
    for name, tensor in plain.state_dict().items():
        assert torch.equal(tensor, timed.state_dict()[name]), name
    assert set(timed.state_dict()) - set(plain.state_dict()) == {
        "time_embedding.weight",
        "think_head.weight",
        "think_head.bias",
    }
    assert (timed.time_embedding.weight[human_time.NONE] == 0).all()
    x = torch.tensor([[tokens.BOS, 12, 28]])
    with pytest.raises(ValueError, match="time inputs"):
        timed(x)
    with pytest.raises(ValueError, match="GPTConfig.time_inputs"):
        plain(x, time=torch.zeros((1, 3, 4), dtype=torch.long))
    with pytest.raises(ValueError, match="GPTConfig.think_time"):
        plain(x, think_time=True)
    # the records of a run without them are those of before (no new key)
    assert set(GPTConfig().to_dict()) == {
        "block_size", "vocab_size", "n_layer", "n_head", "n_embd", "bias", "conditioning",
        "outcome",
    }  # fmt: skip
    assert GPTConfig(time_inputs=True).to_dict()["time_inputs"] is True
    off, on = RunSettings(dataset="d"), RunSettings(dataset="d", time_inputs=True, think_time=True)
    assert not {"time_inputs", "think_time", "think_time_weight"} & set(off.identity())
    assert {k: on.identity()[k] for k in ("time_inputs", "think_time", "think_time_weight")} == {
        "time_inputs": True,
        "think_time": True,
        "think_time_weight": 0.2,
    }
    with torch.device("meta"):
        net = gpt.build("baseline", device="meta", time_inputs=True, think_time=True)
    assert net.num_parameters() == BASELINE_PARAMETERS + 161 * 768 + 39 * 769 == 86_094_375


def test_a_checkpoint_reloads_the_time_inputs_and_the_head() -> None:
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=True)
    payload = {
        "model": net.state_dict(),
        "identity": {"model": {"preset": "tiny", **net.config.to_dict()}},
    }
    loaded = weights.model_of(payload, "x.pt", "cpu")
    assert loaded.config.time_inputs and loaded.config.think_time
    assert torch.equal(loaded.think_head.weight, net.think_head.weight)


# ------------------------------------------------------------------ the probe, two gloo ranks

# every input and head at once: the one two-rank resume test of conditioning, the outcome head
# and human time (each adds state the resume must carry; a plain run's: test_segment.py)
HYPER = [
    *RESUME_HYPER,
    "--dataset=clocked",
    "--conditioning=elo",
    "--outcome=on",
    "--outcome-weight=0.5",
    "--time-inputs=on",
    "--think-time=on",
    "--think-time-weight=0.5",
]


def test_the_probe_runs_the_time_inputs_and_the_head(clocked_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe-results.json"
    args = ["probe", f"--cache={clocked_cache}", f"--run-dir={tmp_path}", f"--probe-out={out}"]
    result = run_segment([*args, "--model=tiny", "--time-inputs=on", "--think-time=on"])
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(out.read_text())
    assert probe["status"] == "passed" and probe["time_inputs"] and probe["think_time"]
    assert (
        probe["parameters"] == gpt.build("tiny", time_inputs=True, think_time=True).num_parameters()
    )


def checks(run_dir: Path) -> list[dict]:
    """The validation checks of a run's results, without their timings."""
    history = json.loads((run_dir / "train/results.json").read_text())["history"]
    return [{k: v for k, v in h["validation"].items() if k != "seconds"} for h in history]


@pytest.mark.slow
@BOTH_LAYOUTS
def test_a_run_with_every_input_and_head_resumed_is_bitwise_the_uninterrupted_one(
    clocked_cache: Path, tmp_path: Path, flags: list[str]
) -> None:
    """The rating prefix, the outcome head, the time inputs and the think-time head at once:
    the run trained in two segments is the one trained in one, bit for bit, and each head
    trained."""
    whole, run_dir, a, b = resumed_beside_whole(clocked_cache, tmp_path, *HYPER, *flags)
    heads = {"time_embedding.weight", "think_head.weight", "outcome_head.weight"}
    assert heads <= set(a["model"])
    identity = b["identity"]
    assert conditioning.of_identity(identity) == "elo"
    assert identity["tokenizer"]["layout"] == conditioning.LAYOUT_VERSION["elo"]
    assert identity["model"]["time_inputs"] and identity["model"]["think_time"]
    assert identity["model"]["outcome"] is True and identity["outcome_weight"] == 0.5
    assert identity["think_time_weight"] == 0.5
    history = checks(run_dir)
    assert history == checks(whole) and history[-1]["valid_targets"] > 0
    for head in ("think_time", "outcome"):
        assert all(h[head]["targets"] > 0 for h in history), head
        assert history[-1][head]["nll"] != history[0][head]["nll"], head  # it trained
    net = weights.load_model(run_dir / "train/best.pt", "cpu")
    assert net.config.time_inputs and net.config.think_time and net.config.outcome


@pytest.mark.slow
def test_a_run_cannot_resume_across_the_outcome_and_time_settings(
    clocked_cache: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    first_half(clocked_cache, run_dir, *HYPER, "--packing=off")  # the padded resume test's
    changed = [*HYPER[:-5], "--packing=off", "--segment-updates=2"]  # no outcome, no time
    result = run_segment([*segment_args(clocked_cache, run_dir, 1), *changed])
    assert result.returncode != 0
    changed = result.stderr.split("changed: ", 1)[1].split(" (", 1)[0].split(", ")
    keys = ("model.outcome", "outcome", "outcome_weight", "model.think_time", "think_time")
    for key in (*keys, "think_time_weight", "model.time_inputs"):
        assert key in changed, result.stderr[-2000:]
