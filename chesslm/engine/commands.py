"""What the engine reads from a command's words, before the model is asked: ``position``'s
board (``parse_position``; ``unencodable_start``: a start the model cannot read) and ``go``'s
flags and clocks (``parse_go``), each with the complaints the session says in ``info string``
lines. python-chess only: bad words are complaints, never an error."""

from __future__ import annotations

import chess

GO_NUMBERS = ("movetime", "nodes", "wtime", "btime", "winc", "binc", "movestogo", "depth", "mate")
GO_WORDS = (*GO_NUMBERS, "infinite", "ponder", "searchmoves")


def unencodable_start(board: chess.Board) -> str | None:
    """Why the model cannot read a game from this starting board, or None for the standard
    start (move counters aside: they do not change the position)."""
    if board.epd() == chess.Board().epd():
        return None
    return (
        "the model reads games from the standard start position and this FEN is not it"
        " (its move history is unknown)"
    )


def parse_position(args: list[str]) -> tuple[chess.Board, list[str]]:
    """The board of a ``position`` command's arguments and the complaints about them (an
    illegal move ends the moves there; a bad FEN leaves the start position)."""
    words = list(args)
    moves = words[words.index("moves") + 1 :] if "moves" in words else []
    head = words[: words.index("moves")] if "moves" in words else words
    complaints = []
    board = chess.Board()
    if head[:1] == ["fen"]:
        fen = " ".join(head[1:])
        try:
            board = chess.Board(fen)
        except ValueError as error:
            complaints.append(f"invalid FEN {fen!r} ({error}); using the start position")
    elif head != ["startpos"]:
        complaints.append(f"position needs startpos or fen, got {' '.join(head)!r}; using startpos")
    for i, text in enumerate(moves):
        try:
            move = board.parse_uci(text)
            if not move:  # 0000: a null move has no tokens
                raise ValueError(text)
            board.push(move)
        except ValueError:
            complaints.append(
                f"illegal move {text!r} at move {i + 1} of the position's moves; position taken"
                f" up to the move before it ({len(board.move_stack)} moves)"
            )
            break
    return board, complaints


def parse_go(args: list[str]) -> tuple[set[str], dict[str, int], list[str]]:
    """``go``'s flags (``infinite``, ``ponder``), its numbers (the clocks read; no limit bounds
    the search: one forward pass is the whole of it) and complaints about its words."""
    flags, numbers, complaints = set(), {}, []
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("infinite", "ponder"):
            flags.add(word)
        elif word in GO_NUMBERS and i + 1 < len(args):
            try:
                numbers[word] = int(args[i + 1])
            except ValueError:
                complaints.append(f"go {word}: not an integer: {args[i + 1]!r}; ignored")
            i += 1
        elif word == "searchmoves":
            complaints.append("go searchmoves is not supported: every legal move is considered")
            while i + 1 < len(args) and args[i + 1] not in GO_WORDS:
                i += 1
        else:
            complaints.append(f"go: ignored {word!r}")
        i += 1
    return flags, numbers, complaints
