"""``README.md`` of an export: a model card saying what the weights are, what data made them
(fingerprint, filters, licence), how they were trained and how they play, from the run's own
records (the checkpoint's identity, the dataset manifest and integrity receipt, results.json
and, when the run has them, its play evaluation's records, read by
``chesslm.record.play_records`` as the summary's play section reads them: the same Elo
sentences). A rating-conditioned card says how to build the rating prefix in front of a game
(``chesslm.data.conditioning``), with code that builds it from ``chess-tokenizer.json`` alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from chesslm.data import conditioning, tokens
from chesslm.files import lookup
from chesslm.match import metrics
from chesslm.record.elo import NOT_PLAYED, Elo
from chesslm.record.move_match import MatchRow, MoveMatch
from chesslm.record.play_records import Play

LICENCE = (
    "The training games come from the Lichess open database (https://database.lichess.org),"
    " released under CC0 1.0 (public domain dedication). The card offers the weights under"
    " CC0 1.0 as well (its `license` line); a publisher who chooses another licence changes"
    " that line."
)
# the Hugging Face card metadata: what the Hub lists and how it runs the model
FRONT_MATTER = (
    "library_name: transformers\npipeline_tag: text-generation\nlicense: cc0-1.0\n"
    "datasets: [Lichess/standard-chess-games]\ntags: [chess, gpt2, chesslm]\n"
)
TRAINING_KEYS = (
    "world_size",
    "device",
    "micro",
    "accum",
    "lr",
    "epochs",
    "seed",
    "warmup_steps",
    "schedule_steps",
    "max_updates",
    "optimizer",
    "precision",
    "sampling",
    "torch",
)


@dataclass
class Facts:
    """What the card reports, read by ``chesslm.export.folder``."""

    run: str
    checkpoint: dict[str, Any]  # path, sha256, step, best_nll
    identity: dict[str, Any]  # the checkpoint's training identity
    manifest: dict[str, Any]
    receipt: dict[str, Any]
    results: dict[str, Any]
    play: Play = field(default_factory=Play)  # read_play's
    weights_sha256: str = ""  # model.safetensors', as SHA256SUMS lists it
    outcome: bool = False  # the checkpoint has the outcome head: outcome_head.safetensors
    time_inputs: bool = False  # it reads the clocks: human_time.safetensors' time embedding
    think_time: bool = False  # it has the think-time head: human_time.safetensors' think_head


def render(facts: Facts) -> str:
    parts = [
        header(facts),
        use(facts),
        tokenizer(facts),
        data(facts),
        training(facts),
        evaluation(facts),
        f"## Licence\n\n{LICENCE}\n",
    ]
    return "\n".join(parts)


def _value(value: Any, none: str = "not recorded") -> str:
    return none if value is None else f"`{json.dumps(value)}`"


def header(facts: Facts) -> str:
    model, ckpt = facts.identity.get("model", {}), facts.checkpoint
    return (
        f"---\n{FRONT_MATTER}---\n\n"
        f"# chesslm run `{facts.run}`: a chess-move GPT-2\n\n"
        f"A GPT-2 (preset `{model.get('preset')}`: {model.get('n_layer')} layers,"
        f" {model.get('n_head')} heads, width {model.get('n_embd')}, context"
        f" {model.get('block_size')} tokens, vocabulary {model.get('vocab_size')},"
        f" {facts.identity.get('parameters')} parameters) trained by chesslm to predict the next"
        " move token of Lichess games. Weights: the run's `best.pt` (step"
        f" {ckpt.get('step')}, validation NLL {ckpt.get('best_nll')}, sha256"
        f" `{ckpt.get('sha256')}`), in FP32, in Hugging Face's GPT-2 layout: its logits are"
        " the chesslm model's (the tests compare them on real games: max abs difference"
        " <= 1e-4 in FP32).\n\n"
        f"`SHA256SUMS` lists every file's sha256 (`model.safetensors`: `{facts.weights_sha256}`):"
        " check a copy with `sha256sum -c SHA256SUMS` in this folder; `chesslm-uci` and"
        " `chesslm-analyse` check it before they load the folder.\n"
    )


def layout(facts: Facts) -> str:
    """The checkpoint's input layout (``none`` for checkpoints from before conditioning)."""
    return conditioning.of_identity(facts.identity)


# runs unchanged from any folder, with only torch, transformers, safetensors and chess
# (tests/workflow/test_export.py executes it where chesslm cannot be imported): USE_CODE, with the
# outcome head OUTCOME_CODE, then the examples (use_code)
USE_CODE = """\
import json, os
import chess, torch
from transformers import GPT2LMHeadModel

MODEL_DIR = "."  # this folder: where model.safetensors, config.json, chess-tokenizer.json are
model = GPT2LMHeadModel.from_pretrained(MODEL_DIR).eval()
vocab = json.load(open(os.path.join(MODEL_DIR, "chess-tokenizer.json")))

def rating_id(side, elo):  # a rating-conditioned model's prefix id; elo None: unknown
    bins = vocab["ratings"]["bins"]  # bins[0]: unknown; then by upper bound ("below")
    if elo is None or elo < 0:
        return bins[0][side]
    return next(b[side] for b in bins[1:] if b["below"] is None or elo < b["below"])

def move_ids(move):  # a move's (source, destination, promotion) ids
    promotion = chess.piece_symbol(move.promotion) if move.promotion else "none"
    return (vocab["squares"][chess.square_name(move.from_square)],
            vocab["squares"][chess.square_name(move.to_square)], vocab["promotion"][promotion])

@torch.no_grad()
def next_logp(rows, allowed):  # per row: log-probability of each allowed next id
    logits = model(torch.tensor(rows)).logits[:, -1]
    out = []
    for z, ids in zip(logits, allowed):
        ids = sorted(ids)
        out.append(dict(zip(ids, torch.log_softmax(z[ids], -1).tolist())))
    return out

def game_ids(moves, white_elo=None, black_elo=None):  # (ids, board) after the UCI moves
    board, ids = chess.Board(), []
    if vocab["conditioning"] != "none":
        ids = [rating_id("white", white_elo), rating_id("black", black_elo)]
    ids.append(vocab["special"]["BOS"])
    for text in moves:
        move = chess.Move.from_uci(text)
        ids += move_ids(move)
        board.push(move)
    return ids, board

def move_probabilities(moves, white_elo=None, black_elo=None):
    \"\"\"UCI moves played from the standard start -> every legal move's probability.\"\"\"
    ids, board = game_ids(moves, white_elo, black_elo)
    legal = {move.uci(): move_ids(move) for move in board.legal_moves}
    # source, then destination, then promotion: each renormalised over the legal ids
    src = next_logp([ids], [{s for s, _, _ in legal.values()}])[0]
    sources = sorted(src)
    dst = next_logp([ids + [s] for s in sources],
                    [{d for s2, d, _ in legal.values() if s2 == s} for s in sources])
    dst = dict(zip(sources, dst))
    out = {}
    for uci, (s, d, p) in legal.items():
        promotions = {p2 for s2, d2, p2 in legal.values() if (s2, d2) == (s, d)}
        pro = next_logp([ids + [s, d]], [promotions])[0][p] if len(promotions) > 1 else 0.0
        out[uci] = float(torch.tensor(src[s] + dst[s][d] + pro).exp())
    return out
"""
PRINT_MOVES = """
print(max(move_probabilities(["e2e4", "e7e5"]).items(), key=lambda kv: kv[1]))
"""
# with the outcome head (Facts.outcome): its file, and outcome() beside move_probabilities
OUTCOME_CODE = """
from safetensors.torch import load_file
head = load_file(os.path.join(MODEL_DIR, "outcome_head.safetensors"))  # weight (3, n_embd), bias

@torch.no_grad()
def outcome(moves, white_elo=None, black_elo=None):
    \"\"\"UCI moves played from the standard start -> the game's result as the model expects it,
    from the side to move then: {"win", "draw", "loss"} probabilities (they sum to 1).\"\"\"
    ids, _ = game_ids(moves, white_elo, black_elo)
    # the final hidden state (after ln_f) at the position's last token: BOS, or the last move's
    hidden = model.transformer(torch.tensor([ids])).last_hidden_state[0, -1]
    p = torch.softmax(hidden @ head["weight"].T + head["bias"], -1)
    return dict(zip(("win", "draw", "loss"), p.tolist()))
"""
PRINT_OUTCOME = """print(outcome(["e2e4", "e7e5"]))  # White to move
"""


# with human time (Facts.time_inputs or think_time): the file, the clocks' rows, think_time()
HUMAN_TIME_CODE = """
human = json.load(open(os.path.join(MODEL_DIR, "config.json")))["chesslm_human_time"]
timed = load_file(os.path.join(MODEL_DIR, human["file"]))  # time_embedding, think_head.*

def seconds_value(t):  # a time's value: 0 unknown, else 1 + its bin (bins by lower edge)
    if t is None or t < 0:
        return 0
    return 1 + max(i for i, edge in enumerate(human["bin_edges_seconds"]) if t >= edge)

def time_rows(plies, clocks=None, base=None, increment=None):
    \"\"\"Each position's four rows (BOS, then after each move): the TimeControl's base and
    increment, the mover's and the opponent's time left before the move. clocks[k]: the
    [%clk] seconds after move k (None: unknown); base, increment: None when unknown.\"\"\"
    if not human["time_inputs"]:
        return None
    clocks = list(clocks or []) + [None] * (plies - len(clocks or []))
    known = base is not None and increment is not None and base >= 0 and increment >= 0
    start = (base or max(increment, human["min_start_seconds"])) if known else None
    rows = []
    for k in range(plies + 1):
        mover = clocks[k - 2] if k >= 2 else start  # its reading after its previous move
        opponent = clocks[k - 1] if k >= 1 else start
        values = [seconds_value(v) for v in (base, increment, mover, opponent)]
        rows.append([1 + f * human["values_per_feature"] + v for f, v in enumerate(values)])
    return rows

def inputs(rows, time):  # the model's inputs: ids, or their embeddings with the time rows
    if time is None:
        return {"input_ids": torch.tensor(rows)}
    lead = 0 if vocab["conditioning"] == "none" else 2  # the rating ids before BOS
    x = model.transformer.wte(torch.tensor(rows))
    for k, r in enumerate(time):  # position k: BOS, then each move's last id
        if lead + 3 * k < x.size(1):
            x[:, lead + 3 * k] += timed["time_embedding"][r].sum(0)
    return {"inputs_embeds": x}

@torch.no_grad()
def think_time(moves, clocks=None, base=None, increment=None, white_elo=None, black_elo=None):
    \"\"\"The next move's think time as the model expects it: each bin's probability, by its
    lower edge in seconds (the last bin is open).\"\"\"
    ids, _ = game_ids(moves, white_elo, black_elo)
    time = time_rows(len(moves), clocks, base, increment)
    hidden = model.transformer(**inputs([ids], time)).last_hidden_state[0, -1]
    p = torch.softmax(hidden @ timed["think_head.weight"].T + timed["think_head.bias"], -1)
    return dict(zip(human["bin_edges_seconds"], p.tolist()))
"""
PRINT_THINK = """print(think_time(["e2e4", "e7e5"], clocks=[180, 178], base=180, increment=2))
"""
# USE_CODE's (and OUTCOME_CODE's) inputs become the time-aware ones: (text, replacement)
TIMED_CALLS = (
    ("def next_logp(rows, allowed):", "def next_logp(rows, allowed, time=None):"),
    ("model(torch.tensor(rows)).logits", "model(**inputs(rows, time)).logits"),
    ("def move_probabilities(moves, white_elo=None, black_elo=None):",
     "def move_probabilities(moves, white_elo=None, black_elo=None, clocks=None, base=None,\n"
     "                       increment=None):"),
    ("    ids, board = game_ids(moves, white_elo, black_elo)\n",
     "    ids, board = game_ids(moves, white_elo, black_elo)\n"
     "    time = time_rows(len(moves), clocks, base, increment)  # None: no time inputs\n"),
    ("for s, _, _ in legal.values()}])[0]", "for s, _, _ in legal.values()}], time)[0]"),
    ("if s2 == s} for s in sources])", "if s2 == s} for s in sources], time)"),
    ("next_logp([ids + [s, d]], [promotions])", "next_logp([ids + [s, d]], [promotions], time)"),
    ("def outcome(moves, white_elo=None, black_elo=None):",
     "def outcome(moves, white_elo=None, black_elo=None, clocks=None, base=None, increment=None):"),
    ("model.transformer(torch.tensor([ids])).last_hidden_state",
     "model.transformer(**inputs([ids], time_rows(len(moves), clocks, base, increment)))"
     ".last_hidden_state"),
)  # fmt: skip


def use_code(facts: Facts) -> str:
    """The card's Python block: ``outcome`` too when the model has the head, the clocks and
    ``think_time`` with human time (the blocks' inputs then made time-aware)."""
    code = USE_CODE + (OUTCOME_CODE if facts.outcome else "")
    if not (facts.time_inputs or facts.think_time):
        return code + PRINT_MOVES + (PRINT_OUTCOME if facts.outcome else "")
    for text, timed in TIMED_CALLS:
        code = code.replace(text, timed)
    code += ("" if facts.outcome else "from safetensors.torch import load_file\n") + HUMAN_TIME_CODE
    prints = PRINT_MOVES + (PRINT_OUTCOME if facts.outcome else "")
    return code + prints + (PRINT_THINK if facts.think_time else "")


# PyTorch's CPU wheels (pytorch.org's install selector, "CPU"): pip's default torch on Linux
# brings CUDA and its nvidia-* wheels
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def use(facts: Facts) -> str:
    note = use_conditioned(facts) if conditioning.PREFIX_LENGTH[layout(facts)] else ""
    return f"""## Use

Requirements: `pip install torch transformers safetensors chess`; on a machine without an
NVIDIA GPU, take PyTorch's CPU build first (a fraction of the download, no `nvidia-*` wheels):
`{CPU_TORCH}`.
Set `MODEL_DIR` to this folder (`"."` when run inside it); `move_probabilities(moves)` takes
the UCI moves played from the standard start and gives every legal move's probability (they
sum to 1), as chesslm's play evaluation scores them: source, destination and promotion, each
renormalised over the legal ids.{note}{use_outcome(facts)}{use_human_time(facts)}

```python
{use_code(facts)}```

To play it, chesslm's UCI engine runs this folder or the run's checkpoint:
`chesslm-uci --checkpoint PATH/TO/THIS/FOLDER` (or `results/{facts.run}/train/best.pt`).
"""


HUMAN_TIME_READS = (
    " It reads the game's clocks: at BOS and after each move (its last id) four rows of"
    " `time_embedding` are added to the input embedding (GPT-2 takes it as `inputs_embeds`):"
    " the time control's base and increment and the mover's and the opponent's time left"
    " before the move, each in one of the log-spaced bins of `bin_edges_seconds` or unknown;"
    " pass `clocks` (the `[%clk]` seconds after each move), `base` and `increment` (None:"
    " unknown)."
)
HUMAN_TIME_HEAD = (
    " `think_time(moves, ...)` gives the think-time head's distribution (a linear map of"
    " `last_hidden_state` to the bins) over the time the side to move will take."
)


def use_human_time(facts: Facts) -> str:
    if not (facts.time_inputs or facts.think_time):
        return ""
    reads = HUMAN_TIME_READS if facts.time_inputs else ""
    head = HUMAN_TIME_HEAD if facts.think_time else ""
    return f"""

This model has **human time** (`human_time.safetensors`, named in `config.json` as
`chesslm_human_time`).{reads}{head}"""


def use_outcome(facts: Facts) -> str:
    if not facts.outcome:
        return ""
    return """

This model has an **outcome head** (`outcome_head.safetensors`, named in `config.json` as
`chesslm_outcome_head`): a linear map (`weight` 3 x n_embd, `bias` 3) of GPT-2's final hidden
state (`last_hidden_state`, after `ln_f`) to the logits of the game's result from the side to
move: win, draw, loss. chesslm trained it on every position of its games, read at BOS and at
each move's last (promotion) token; `outcome(moves)` gives its probabilities after `moves`."""


def use_conditioned(facts: Facts) -> str:
    w, b = 1500, 1650
    top = conditioning.LOW + conditioning.WIDTH * (conditioning.BINS - 3)
    return f"""

This model is **rating-conditioned** (`conditioning: {layout(facts)}`, layout
`{conditioning.LAYOUT_VERSION[layout(facts)]}`): every game it reads starts with two rating
ids, White's then Black's, before BOS; pass `white_elo` and `black_elo` (None: unknown). Each
side has {conditioning.BINS} ids (`ratings.bins` of `chess-tokenizer.json`): "unknown" (no
numeric Elo), below {conditioning.LOW}, one per {conditioning.WIDTH} Elo from
{conditioning.LOW} to {top - 1}, and {top} or more; White's ids are
{conditioning.WHITE_FIRST}-{conditioning.BLACK_FIRST - 1}, Black's
{conditioning.BLACK_FIRST}-{tokens.VOCAB_SIZE - 1}. They are inputs only: the model never
predicts them. Example: White {w}, Black {b} gives the prefix
`{conditioning.prefix(w, b)}`, then BOS ({tokens.BOS}) and the moves. chesslm's UCI engine
takes them as options `SelfElo`, `OppoElo` and `Elo` (both)."""


def tokenizer(facts: Facts) -> str:
    version = lookup(facts.identity, "tokenizer.version")
    return (
        f"## Tokenizer\n\n`{version}` (chesslm.data.tokens; sha256 of its module"
        f" `{lookup(facts.identity, 'tokenizer.sha256')}`), mapped in `chess-tokenizer.json`: ids"
        f" 0-63 squares a1..h8, {tokens.PROMO_NONE} no promotion, {tokens.PROMO_NONE + 1}-"
        f"{tokens.PROMO_NONE + 4} promotion to knight, bishop, rook, queen, {tokens.BOS} BOS,"
        f" {tokens.EOS} EOS, {tokens.PAD} PAD, {tokens.FIRST_RESERVED}-{tokens.VOCAB_SIZE - 1}"
        " reserved. A game is BOS, one (source, destination, promotion) triple per move, EOS."
        + _prefix_note(facts)
        + "\n"
    )


def _prefix_note(facts: Facts) -> str:
    if not conditioning.PREFIX_LENGTH[layout(facts)]:
        return ""
    return (
        f" This model's games start with the rating prefix (layout"
        f" `{conditioning.LAYOUT_VERSION[layout(facts)]}`): reserved ids"
        f" {conditioning.WHITE_FIRST}-{tokens.VOCAB_SIZE - 1} carry White's and Black's"
        " rating bins, as inputs only (see Use)."
    )


def data(facts: Facts) -> str:
    m, r = facts.manifest, facts.receipt
    settings = m.get("settings", {})
    inputs = ", ".join(
        f"`{i.get('name')}` (sha256 `{i.get('sha256')}`)" for i in m.get("inputs", [])
    )
    filters = "\n".join(
        f"| `{k}` | {_value(v, none='none (no filter)')} |"
        for k, v in settings.get("filters", {}).items()
    )
    return (
        f"## Data\n\nDataset fingerprint `{m.get('fingerprint')}` (the checkpoint's identity"
        f" names `{facts.identity.get('dataset_fingerprint')}`); integrity receipt: all files"
        f" verified {r.get('all_files_verified')}, test split decoded {r.get('test_decoded')}."
        f" Inputs: {inputs or 'not recorded'}. Games per split: {_value(m.get('games'))};"
        f" split {_value(settings.get('split'))}; context {settings.get('context')} tokens."
        " The test split was never evaluated.\n\n"
        f"| filter | value |\n|---|---|\n{filters}\n"
    )


def training(facts: Facts) -> str:
    rows = "\n".join(f"| `{k}` | {_value(facts.identity.get(k))} |" for k in TRAINING_KEYS)
    res = facts.results
    return (
        f"## Training\n\nStatus `{res.get('status')}` at step {lookup(res, 'cursor.step')};"
        f" best validation NLL {res.get('best_validation_nll')} at step {res.get('best_step')}."
        f"\n\n| setting | value |\n|---|---|\n{rows}\n"
    )


def evaluation(facts: Facts) -> str:
    match, elo = facts.play.move_match, facts.play.elo
    if not match and not elo:
        return "## Evaluation\n\nThe run has no play evaluation (`runs.NAME.play.enabled`).\n"
    return "## Evaluation\n\n" + move_matching(match) + elo_section(elo)


def move_matching(match: MoveMatch | None) -> str:
    if not match:
        return "Move-matching: not evaluated.\n\n"
    lines = []
    for name, ds in match.datasets.items():
        row = ds.overall
        if row:
            lines.append(
                f"| {name} | {row.protocol} | {row.positions} | "
                + " | ".join(_ci(row, m.name) for m in metrics.METRICS)
                + " |"
            )
    protocols = "; ".join(f"`{k}`: {v}" for k, v in match.protocols.items())
    return (
        f"Move-matching on validation games ({match.definition}; {protocols};"
        f" {match.interval}):\n\n| dataset | protocol | positions | "
        + " | ".join(m.label for m in metrics.METRICS)
        + " |\n|---|---|---|"
        + "---|" * len(metrics.METRICS)
        + "\n"
        + "\n".join(lines)
        + "\n\n"
    )


def _ci(row: MatchRow, stat: str) -> str:
    value, low, high = row.interval(stat)
    if value is None:
        return "-"
    if low is None or high is None:  # fewer games than an interval needs
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def elo_section(elo: Elo | None) -> str:
    """The Elo in the words of the report's play section (``Elo``'s sentences): the
    estimate or its bound, the ladder, and whether its games replay."""
    if elo is None:
        return "Elo: not evaluated.\n"
    if not elo.played:
        return f"Elo: {NOT_PLAYED}\n"
    return f"Elo: {elo.sentence()}\n\n{elo.ladder_sentence()}\n\n{elo.reproducibility_sentence()}\n"
