"""Test-only fault injection for trainer subprocesses (on PYTHONPATH only in tests).

CHESSLM_FAULT=nan:N   after N accumulation groups, poison a gradient with NaN on every rank
CHESSLM_FAULT=kill:N  after N accumulation groups, SIGKILL rank 0 (before its optimizer step)
"""

import os

if os.environ.get("CHESSLM_FAULT"):
    import math
    import signal

    import chesslm.train.batching as _batching

    _kind, _after = os.environ["CHESSLM_FAULT"].split(":")
    _original = _batching.backward_group
    _calls = [0]

    def _faulty(net, *args, **kwargs):
        values = _original(net, *args, **kwargs)
        _calls[0] += 1
        if _calls[0] > int(_after):
            if _kind == "nan":
                next(iter(net.parameters())).grad.fill_(math.nan)
            elif _kind == "kill" and kwargs.get("rank") == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return values

    _batching.backward_group = _faulty
