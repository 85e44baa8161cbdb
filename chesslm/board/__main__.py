"""``python -m chesslm.board``: the console script ``chesslm-board`` (``chesslm.board.cli``)."""

import sys

from chesslm.board.cli import main

if __name__ == "__main__":  # not when pytest's --doctest-modules imports it
    sys.exit(main())
