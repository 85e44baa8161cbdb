"""Test-only fault injection for trainer subprocesses (on PYTHONPATH only in tests).

CHESSLM_FAULT=nan:N   after N accumulation groups, poison a gradient with NaN on every rank
CHESSLM_FAULT=kill:N  after N accumulation groups, SIGKILL rank 0 (before its optimizer step)
CHESSLM_FAULT=killsave:N  SIGKILL the process in its checkpoint writer thread, amid the write of
                      its save N (1 = its first), once part of .last.pt.PID.RANDOM.tmp is written
CHESSLM_FAULT=killwrite:NAME  SIGKILL the process whose atomic write (chesslm.files.open_atomic)
                      of a file named NAME has written it whole, before the rename: its
                      .NAME.PID.RANDOM.tmp is left as a kill leaves it (no torch imported here)
"""

import os

if os.environ.get("CHESSLM_FAULT", "").startswith("killwrite:"):
    import contextlib
    import signal
    from pathlib import Path

    import chesslm.files as _files

    _name = os.environ["CHESSLM_FAULT"].split(":", 1)[1]
    _open_atomic = _files.open_atomic

    @contextlib.contextmanager
    def _killed_at_rename(path, mode="wb", **kwargs):
        with _open_atomic(path, mode, **kwargs) as fh:
            yield fh
            if Path(path).name == _name:
                fh.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    _files.open_atomic = _killed_at_rename
elif os.environ.get("CHESSLM_FAULT"):
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

    if _kind == "killsave":
        import threading

        import chesslm.model.checkpoint as _checkpoint

        _Writer = _checkpoint._HashingWriter
        _saves = [0]

        class _KilledWriter(_Writer):
            def __init__(self, fh):
                super().__init__(fh)
                _saves[0] += 1
                self.writes = 0

            def write(self, data):
                written = super().write(data)
                self.writes += 1
                if _saves[0] == int(_after) and self.writes == 3:
                    assert threading.current_thread().name.startswith("checkpoint-writer")
                    self.flush()  # the partial file is there for the test to see
                    os.kill(os.getpid(), signal.SIGKILL)
                return written

        _checkpoint._HashingWriter = _KilledWriter
