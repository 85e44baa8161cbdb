"""One bounded training segment (or the throughput probe), run under torchrun.

    torchrun --standalone --nproc-per-node=W -m chesslm.train.segment train \\
        --run-name NAME --cache DIR --run-dir results/NAME --segment N \\
        --status-out segments/N.json [--previous-status segments/N-1.json] \\
        --dataset D [--model M --workers W ... : one flag per run key, RunSettings.to_args()]
    python -m torch.distributed.run ... -m chesslm.train.segment probe --cache DIR --run-dir ... \\
        --probe-out results/NAME/probe-results.json --dataset D [run keys...]

A segment resumes ``train/last.pt`` (checked against the previous segment's status), trains
until a terminal status, its time budget (``--max-seconds``, at most 420), the job deadline
(CHESS_JOB_DEADLINE) or ``--segment-updates`` optimizer updates, validates, saves ``last.pt``
atomically (in the background: chesslm.train.saver), waits for that save and writes its status
file last. It exits 0 on every orderly stop, resumable or terminal, so a workflow can chain
segments until the status says ``terminal``.

The run's settings are ``chesslm.train.settings.RunSettings`` (its flags, defaults and checks);
the per-process rest (run name, paths, segment number) is an ``Invocation``. The model and its
update step live in ``trainer``, the probe in ``probe``, the cursor and metrics in ``state``,
status files and ``results.json`` in ``status`` (all in ``chesslm.train``); this module is the
CLI and the segment's loop (resume, stop reasons, validation cadence, saving).
"""

from __future__ import annotations

from chesslm.train import launch

if __name__ == "__main__":  # before the slow imports below (torch: seconds on a busy host)
    launch.bind_to_launcher()  # a worker must not outlive torchrun (chesslm.train.launch)

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chesslm.files import write_json_atomic
from chesslm.record.events import EventLog
from chesslm.record.telemetry import Telemetry
from chesslm.train import checkpoint, distributed, resume, segment_end, validation
from chesslm.train.deadline import Deadline
from chesslm.train.probe import probe
from chesslm.train.progress import Progress
from chesslm.train.saver import Saver
from chesslm.train.settings import RunSettings, add_arguments, from_namespace
from chesslm.train.state import TERMINAL, TrainState
from chesslm.train.status import (
    finish_terminal,
    finite,
    record_failure,
    results_record,
    write_status,
)
from chesslm.train.trainer import Trainer, memory_record, open_cache, synchronize

logger = logging.getLogger(__name__)
TRAIN_EVENT_EVERY = 10
STOP_BROADCAST_EVERY = 8  # updates between rank 0's clock checks when there are several ranks
ERROR_PREFIX = "chesslm.train.segment: error:"  # the workflow shows this line on failure
REFUSED_PREFIX = "chesslm.train.segment: refused:"  # and this one (workflow/scripts/logged.sh)
# bad input, refusals, a full disk: their messages name the file and what to do, so one line
# says it all; anything else is a bug or a crash and keeps its traceback
EXPECTED = (ValueError, OSError)
FAILURE_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Invocation:
    """What this process is asked to do besides the run's settings: mode, run name, paths."""

    mode: str  # train or probe
    run: str
    cache: str
    run_dir: str
    integrity_receipt: str | None
    segment: int
    previous_status: str | None
    status_out: str | None
    probe_out: str | None
    probe_results: str | None


def parse_args(argv: Sequence[str] | None = None) -> tuple[Invocation, RunSettings]:
    p = argparse.ArgumentParser(
        prog="python -m chesslm.train.segment", description=__doc__.split("\n")[0]
    )
    p.add_argument("mode", choices=["train", "probe"])
    # not "--run": torchrun would take it for an abbreviation of its own --run-path
    p.add_argument("--run-name", dest="run", default="run", help="recorded in status files")
    p.add_argument("--cache", required=True, help="token cache directory (with cache.json)")
    p.add_argument("--run-dir", required=True, help="results/{run}: checkpoints etc. go to train/")
    p.add_argument(
        "--integrity-receipt", help="the dataset's integrity receipt (hashed into the identity)"
    )
    p.add_argument("--segment", type=int, default=0)
    p.add_argument("--previous-status", help="status file of segment N-1 (required for N > 0)")
    p.add_argument("--status-out", help="where this segment's status JSON goes (train mode)")
    p.add_argument("--probe-out", help="where probe-results.json goes (probe mode)")
    p.add_argument("--probe-results", help="train mode: a probe-results.json that must have passed")
    add_arguments(p)
    ns = p.parse_args(argv)
    try:
        settings = from_namespace(ns, name=ns.run)
    except ValueError as error:
        p.error(str(error))
    if ns.mode == "train" and not ns.status_out:
        p.error("train mode needs --status-out")
    if ns.mode == "probe" and not ns.probe_out:
        p.error("probe mode needs --probe-out")
    if ns.segment > 0 and not ns.previous_status and ns.mode == "train":
        p.error(f"segment {ns.segment} needs --previous-status")
    args = Invocation(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(Invocation)})
    return args, settings


def main(argv: Sequence[str] | None = None) -> int:
    args, settings = parse_args(argv)
    rank, world, _ = distributed.world_from_env()
    logging.basicConfig(
        level=logging.INFO, format=f"[rank{rank}] %(levelname)s %(name)s: %(message)s"
    )
    try:  # fail in one line, before any setup, on an impossible launch
        local = int(os.environ.get("LOCAL_WORLD_SIZE", settings.workers))  # ranks on this node
        distributed.check_devices(settings.device, local)
        if world != settings.workers:
            raise ValueError(
                f"--workers {settings.workers} but {world} processes were launched; use"
                f" torchrun --nproc-per-node={settings.workers}"
            )
    except ValueError as error:
        if rank == 0:
            print(f"{ERROR_PREFIX} {error}", file=sys.stderr)
        return 2
    try:
        if args.mode == "probe":
            probe(
                settings, run=args.run, cache_dir=args.cache, run_dir=args.run_dir,
                out=args.probe_out, integrity_receipt=args.integrity_receipt,
            )  # fmt: skip
        else:
            train(args, settings)
    except resume.AlreadyTrained as refusal:  # exit 0: snakemake then keeps the other's records
        if rank == 0:
            print(f"{REFUSED_PREFIX} {refusal}", file=sys.stderr, flush=True)
    except Exception as error:
        report_failure(error, rank)
        return 1
    return 0


def report_failure(error: Exception, rank: int) -> None:
    """One line on stderr for the console, from rank 0 only (every rank meets the same
    refusal); the traceback of an unexpected error goes to the log, from every rank."""
    if not (expected := isinstance(error, (*EXPECTED, resume.RunDirLocked))):
        traceback.print_exc()
    text = str(error) if expected else f"{type(error).__name__}: {error} (traceback in the log)"
    if rank == 0:
        print(f"{ERROR_PREFIX} {text.strip()}", file=sys.stderr, flush=True)
        return
    if expected:
        logger.error("%s", text)
    # the launcher stops every rank once one exits: let rank 0 (likely failing alike) print
    time.sleep(FAILURE_GRACE_SECONDS)


def train(args: Invocation, settings: RunSettings) -> None:
    start_unix = time.time()
    train_dir = Path(args.run_dir) / "train"
    train_dir.mkdir(parents=True, exist_ok=True)
    with distributed.joined(settings.device, threads=settings.threads_per_worker) as ctx:
        deadline = Deadline.from_env()
        start = resume.decide(
            ctx,
            train_dir,
            segment=args.segment,
            previous_status=args.previous_status,
            probe_results=args.probe_results,
            scratch=[train_dir, Path(args.status_out).parent],
            deadline=deadline,
            status_out=args.status_out,
        )
        base = dict(run=args.run, segment=args.segment, start_unix=start_unix, world_size=ctx.world)
        if start.saved is not None and finish_terminal(
            start.saved, args.status_out, settings, base, train_dir, is_main=ctx.is_main
        ):
            return
        segment_start = start.previous["step_end"] if start.previous else 0
        try:
            Segment(
                args, settings, ctx, train_dir, start.saved, start.previous, segment_start,
                deadline, base,
            ).run()  # fmt: skip
        except BaseException as error:
            record_failure(train_dir, ctx.rank, args.segment, error)
            raise
        if ctx.is_main:  # the run went on: earlier attempts' failures are history
            for path in train_dir.glob("failure-rank*.json"):
                path.unlink(missing_ok=True)


class Segment:
    """The training loop of one segment: prose first, helpers below."""

    def __init__(
        self,
        args: Invocation,
        settings: RunSettings,
        ctx: distributed.Context,
        train_dir: Path,
        saved: dict[str, Any] | None,
        previous: dict[str, Any] | None,
        segment_start: int,
        deadline: Deadline | None,
        base: dict[str, Any],
    ) -> None:
        self.args, self.settings, self.ctx = args, settings, ctx
        self.dir, self.deadline, self.base = train_dir, deadline, base
        self.events = EventLog(train_dir / "events.jsonl", enabled=ctx.is_main)
        self.cache = open_cache(args.cache, ctx)
        self.t = Trainer(
            settings,
            ctx,
            self.cache,
            run_dir=args.run_dir,
            integrity_receipt=args.integrity_receipt,
        )
        self.val = validation.ValidationSet(
            self.cache,
            ctx.device,
            legality_games=settings.legality_eval_games,
            conditioning=settings.conditioning,
            outcome=settings.outcome,
            time_inputs=settings.time_inputs,
            think_time=settings.think_time,
        )
        self.state = TrainState()
        self.resume_action = "fresh"
        if saved is not None:
            checkpoint.check_identity(saved["identity"], self.t.identity, run_dir=args.run_dir)
            self.t.net.load_state_dict(saved["model"])
            self.t.opt.load_state_dict(saved["optimizer"])
            self.t.sched.load_state_dict(saved["scheduler"])
            self.state.load_state_dict(saved)
            checkpoint.restore_rng(saved["rng_by_rank"][ctx.rank], ctx.device)
            self.resume_action = "resumed"
        self.parent_sha = previous["last_pt_sha256"] if previous else None
        self.stop_step = (
            segment_start + settings.segment_updates
            if settings.segment_updates is not None
            else None
        )
        self.step_start = self.state.step
        self.saver = Saver()  # last.pt and best.pt, written in the background (rank 0)
        self.last_sha: str | None = None  # last.pt's, once its save finished
        self.pending: tuple[Any, ...] | None = None  # the update in flight (see loop)
        self.last_end = 0.0
        self.window: Counter = Counter()
        self.first_update_unix: float | None = None  # start-up, reported in the status
        # where the segment's wall time goes (rank 0's clock; perf_counter, no device sync)
        self.wall: Counter = Counter()
        self.targets_start = int(self.state.totals.get("valid_targets", 0))

    def run(self) -> None:
        try:
            self._run()
        except BaseException:
            self.saver.close(failing=True)  # the save in flight still lands (or is logged)
            raise
        self.saver.close()

    def _run(self) -> None:
        self.begin()
        with Telemetry(self.dir / "gpu-telemetry.jsonl", enabled=self.ctx.is_main):
            if self.args.segment == 0 and self.resume_action == "fresh":
                initial = self.validate()
                self.state.initial_validation = initial
                if initial is not None:
                    self.events.write("initial_validation", **initial)
            loop_start, before = time.perf_counter(), self.wall["validation"]
            before += self.wall["checkpointing"]
            status, reason, improved = self.loop()
            looped = time.perf_counter() - loop_start
            # the loop's checks and saves are counted as such; the rest of it is training
            self.wall["training"] = looped - (
                self.wall["validation"] + self.wall["checkpointing"] - before
            )
        self.state.work_seconds += time.perf_counter() - self.work_start
        self.state.segments += 1
        # the status below must describe the checkpoint on disk, so save once more and wait
        # (best.pt too if the segment's last check improved)
        self.save(improved=improved)
        self.wait_for_saves()
        self.keep_segment_end()
        memory = distributed.all_gather_object(memory_record(self.ctx))
        self.progress.say(f"ended at step {self.state.step}: {status}")
        if self.ctx.is_main:
            self.record_end(status, reason, memory)

    def begin(self) -> None:
        """The segment's opening records (rank 0), then the clocks and the progress line."""
        ctx, state = self.ctx, self.state
        self.events.write(
            "segment_start",
            **self.base,
            device=self.settings.device,
            cursor=state.cursor(),
            resume_action=self.resume_action,
            stop_step=self.stop_step,
        )
        if ctx.is_main:
            write_json_atomic(self.dir / "identity.json", self.t.identity)
        self.events.write(
            "data_validated",
            train_games=len(self.cache.train),
            validation_games=len(self.val),
            train_targets=int(self.t.lengths.sum(dtype=np.int64)) - len(self.t.lengths),
            dataset_fingerprint=self.cache.fingerprint,
            test_evaluated=False,
        )
        distributed.barrier()
        synchronize(ctx)
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        self.work_start = time.perf_counter()
        self.wall["startup"] = time.time() - self.base["start_unix"]
        self.progress = Progress(
            f"run {self.args.run}, segment {self.args.segment} of at most"
            f" {self.settings.max_segments}",
            enabled=ctx.is_main,
            budget_s=self.settings.max_seconds,
        )
        self.progress.say(
            f"{self.resume_action} at step {state.step} after {self.wall['startup']:.0f} s of"
            f" start-up; training for up to {self.settings.max_seconds:.0f} s"
        )

    def record_end(self, status: str, reason: str | None, memory: list[dict[str, Any]]) -> None:
        """Rank 0's closing records: results.json if terminal, the events, the status file."""
        state, identity = self.state, self.t.identity
        if status in TERMINAL:
            write_json_atomic(
                self.dir / "results.json", results_record(state, identity, status, self.dir, memory)
            )
            self.events.write(
                "finished",
                status=status,
                best_step=state.best_step,
                best_nll=finite(state.best_nll),
            )
        self.events.write(
            "segment_end",
            **self.base,
            device=self.settings.device,
            status=status,
            stop_reason=reason,
            cursor=state.cursor(),
            updates=state.step - self.step_start,
        )
        write_status(
            self.args.status_out,
            self.settings,
            self.base,
            state,
            identity,
            status,
            stop_reason=reason,
            resume_action=self.resume_action,
            step_start=self.step_start,
            last_sha=self.last_sha,
            first_update_unix=self.first_update_unix,
            wall_split=dict(self.wall),
            useful_targets=int(state.totals.get("valid_targets", 0)) - self.targets_start,
        )

    def loop(self) -> tuple[str, str | None, bool]:
        """Train until a terminal status or a stop; returns (status, stop reason, whether the
        last check improved: the segment's final save is that check's save).

        One update stays in flight: update k+1 is queued on the device before update k's
        numbers are read back (``finish``), so the host prepares the next microbatches while
        the device computes; every stop, validation and save first drains it."""
        s, state = self.settings, self.state
        while True:
            epoch = state.epoch
            plan = self.t.plan(epoch)
            reason, self.window = None, Counter()
            for index in range(state.next_group, len(plan)):
                reason = self.stop_reason(index)
                if reason:
                    break
                self.step(plan[index], index, epoch)
                if s.max_updates is not None and state.step >= s.max_updates:
                    break
                if s.validation_every_steps and state.step % s.validation_every_steps == 0:
                    break
            self.finish()
            completed = state.next_group == len(plan)
            if completed:
                state.next_epoch()
            improved = False
            if self.unvalidated_updates():
                check = self.validate()
                if check is None:  # cut by the deadline: changes neither best nor patience
                    return "total_deadline_soft_stop", "total_deadline_soft_stop", False
                improved = self.record_check(check, epoch, completed, self.window)
            terminal = state.terminal_status(max_updates=s.max_updates, epochs=s.epochs)
            reason = reason or self.step_limit()  # reached at this check: stop now
            if terminal or reason:
                # the segment's final save follows at once: it is this check's save (one
                # gigabyte written once, not twice back to back)
                return terminal or reason, reason or terminal, improved
            self.save(improved, when_idle=True)

    def stop_reason(self, index: int) -> str | None:
        """Why this segment must stop before the next update. Step limits are the same on
        every rank; the clock is rank 0's, broadcast (a host sync with several ranks, so
        only every ``STOP_BROADCAST_EVERY`` updates)."""
        limit = self.step_limit()
        if limit or (self.ctx.world > 1 and index % STOP_BROADCAST_EVERY):
            return limit
        return distributed.broadcast_object(self.clock_stop() if self.ctx.is_main else None)

    def step_limit(self) -> str | None:
        s, step = self.settings, self.state.step
        if s.max_updates is not None and step >= s.max_updates:
            return "max_updates"
        if self.stop_step is not None and step >= self.stop_step:
            return "segment_updates"
        return None

    def clock_stop(self) -> str | None:
        if self.deadline is not None and self.deadline.soft_stop():
            return "time_budget"
        if time.perf_counter() - self.work_start >= self.settings.max_seconds:
            return "time_budget"
        return None

    def step(self, group: list[list[int]], index: int, epoch: int) -> None:
        """Queue one update, then read back the one before it."""
        lr = self.t.sched.get_last_lr()[0]  # the rate this update uses
        launched = time.perf_counter()
        pending = self.t.launch(self.cache.train, group, self.settings.micro)
        queued = time.perf_counter()
        self.state.advance(epoch=epoch, next_group=index + 1)
        self.finish()
        self.pending = (pending, epoch, self.state.step, lr, launched, queued)

    def finish(self) -> None:
        """Read back the update in flight (if any) and account for it: its wall time runs
        from the later of its launch and the previous update's end to its own end. On CUDA
        an update ends when its numbers are read back; on the CPU ``launch`` computes it
        whole, so it ends when ``launch`` returns (the read-back comes after the next
        update, or at once at a stop: timing that would leave the last update ~0 s)."""
        if self.pending is None:
            return
        pending, epoch, step, lr, launched, queued = self.pending
        self.pending = None
        values, norm = pending.result()
        if self.first_update_unix is None:
            self.first_update_unix = time.time()
        now = time.perf_counter()
        end = now if self.ctx.device.type == "cuda" else queued
        elapsed = end - max(launched, self.last_end)
        self.last_end = end
        values = {**values, "train_seconds": elapsed}
        totals = Counter(self.state.totals)
        totals.update(values)
        self.state.totals = dict(totals)
        self.window.update(values)
        self.progress.update(
            step=step,
            epoch=epoch + 1,
            loss_sum=values["loss_sum"],
            targets=values["valid_targets"],
            seconds=elapsed,
        )
        if step % TRAIN_EVENT_EVERY == 0:
            self.events.write(
                "train",
                epoch=epoch + 1,
                step=step,
                nll=values["loss_sum"] / values["valid_targets"],
                lr=lr,
                gradient_norm_before_clip=norm,
                useful_targets_per_second=values["valid_targets"] / elapsed,
                padded_tokens_per_second=values["padded_tokens"] / elapsed,
                padding_fraction=1 - values["valid_targets"] / values["padded_tokens"],
                gpu_work_wall_seconds=now - self.work_start,
            )

    def unvalidated_updates(self) -> bool:
        history = self.state.history
        last = history[-1]["step"] if history else 0
        return self.state.step > last

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Add the block's wall time to ``wall[part]``, however it ends."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.wall[part] += time.perf_counter() - started

    def validate(self) -> dict[str, Any] | None:
        with self.timed("validation"):
            result = None
            if self.ctx.is_main:
                result = validation.evaluate(
                    self.t.net,
                    self.val,
                    micro=validation.games_per_batch(self.ctx.device),
                    deadline=self.deadline,
                    pad_multiple=self.t.pad_multiple,
                    forward=self.t.inference,
                )
            return distributed.broadcast_object(result)

    def record_check(
        self, check: dict[str, Any], epoch: int, completed: bool, totals: Counter
    ) -> bool:
        """Record a validation check in the history and the best; whether it improved."""
        state = self.state
        seconds = max(1e-9, totals["train_seconds"])
        entry = {
            "epoch": epoch + 1,
            "complete_epoch": completed,
            "step": state.step,
            "validation": check,
            "train_nll": totals["loss_sum"] / max(1, totals["valid_targets"]),
            "useful_targets_per_second": totals["valid_targets"] / seconds,
            "padded_tokens_per_second": totals["padded_tokens"] / seconds,
            "padding_fraction": 1 - totals["valid_targets"] / max(1, totals["padded_tokens"]),
        }
        state.history.append(entry)
        improved = checkpoint.improved(check["nll"], state.best_nll)
        if improved:
            state.best_nll, state.best_step, state.bad_checks = check["nll"], state.step, 0
        else:
            state.bad_checks += 1
        self.events.write(
            "validation",
            best_nll=finite(state.best_nll),
            bad_checks=state.bad_checks,
            **entry,
        )
        return improved

    def save(self, improved: bool, *, when_idle: bool = False) -> None:
        """last.pt (and best.pt on improvement), atomically, with every rank's RNG state, in
        the background (chesslm.train.saver): queued behind a save still being written, not
        waiting for it. Only what blocks this thread counts as checkpointing: the RNG gather,
        the snapshot and the saver's rare wait (a final save behind a queued best one).

        ``when_idle``: skip it if a save is still being written and this one is no
        improvement (checks more frequent than a save takes must not stall training; last.pt
        stays a verified, older cursor, and the segment's final save is never skipped)."""
        with self.timed("checkpointing"):
            self._save(improved, when_idle=when_idle)

    def wait_for_saves(self) -> None:
        """Block until the saves in flight and queued are on disk (raising the first error,
        naming its file); from here on ``last_sha`` is the finished last.pt's."""
        with self.timed("checkpointing"):
            self.last_sha = self.saver.wait()

    def keep_segment_end(self) -> None:
        """Rank 0: the final last.pt, verified, copied to segment-end.pt before the status
        names it (chesslm.train.segment_end: the copy a damaged last.pt is restored from)."""
        if self.ctx.is_main:
            with self.timed("checkpointing"):
                segment_end.keep(self.dir, self.last_sha)

    def _save(self, improved: bool, *, when_idle: bool) -> None:
        rngs = distributed.all_gather_object(checkpoint.rng_state(self.ctx.device))
        skip = self.ctx.is_main and when_idle and not improved and self.saver.busy()
        if skip:
            logger.info(
                "step %d: no checkpoint, the last one is still being written", self.state.step
            )
        if self.ctx.is_main and not skip:
            lineage = {"segment": self.args.segment, "parent_sha256": self.parent_sha}
            payload = checkpoint.payload(
                model=self.t.net,
                optimizer=self.t.opt,
                scheduler=self.t.sched,
                state=self.state,
                rng_by_rank=rngs,
                identity=self.t.identity,
                lineage=lineage,
            )
            best = self.dir / "best.pt" if improved else None
            self.saver.submit(self.dir / "last.pt", payload, best=best)
        distributed.barrier()


if __name__ == "__main__":
    launch.end_process(main())
