"""The DataLoader a trainer iterates: batches in the global order, plus resume state.

It counts what the trainer received (not what workers prefetched), starts the next epoch
on each new ``iter()`` unless `load_state_dict` was called since (as torchdata's
StatefulDataLoader does), and restarts persistent workers only when the next iteration
is not the one they would produce anyway. It numbers the batches it yields (steps) and
records where the run re-dealt (a start, a resume, an epoch cut short), so `trace` names
the records of any step. Imports torch: import it through `SplitLoaderFactory`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch.utils.data
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from trainvault.errors import ConfigurationError, ResumeStateError, SelectionError
from trainvault.loading.bridge import Bridge
from trainvault.loading.iterable import Item, SplitIterableDataset
from trainvault.loading.metrics import SlowestRank, StepFigures, WindowFigures
from trainvault.loading.order import Redeal, step_batch
from trainvault.loading.state import AmendmentMark, LoaderState, OrderIdentity
from trainvault.loading.trace import StepTrace, TracedRecord, trace_batch
from trainvault.loading.watchdog import Watchdog


def passthrough(item: Any) -> Any:
    """The DataLoader's own collate: batches are collated inside the dataset already."""
    return item


class TrainVaultDataLoader(torch.utils.data.DataLoader[Item]):
    """A `torch.utils.data.DataLoader` over one selection, with `state_dict()`,
    `load_state_dict()`, `describe_state()`, `trace()` and `figures()`."""

    def __init__(
        self,
        dataset: SplitIterableDataset,
        identity: OrderIdentity,
        *,
        manifest_uri: str | None = None,
        **dataloader_args: Any,
    ):
        try:
            super().__init__(dataset, batch_size=None, collate_fn=passthrough, **dataloader_args)
        except ValueError as exc:  # torch refuses a setting (num_workers < 0, prefetch_factor without workers, ...)
            raise ConfigurationError(f"dataloader_args: {exc}") from None
        self._split_dataset = dataset
        self._identity = identity
        self._manifest_uri = manifest_uri
        # Steps yielded so far, and where the run (re)started dealing (committed at iter()).
        self._step = 0
        self._history: list[Redeal] = []
        self._epoch = 0
        self._position = 0
        self._started_epoch: int | None = None
        self._resume = False
        # The iteration in progress (token, weak reference to it) until it ends, is closed or is
        # dropped unstarted: trace continues it.
        self._live: tuple[object, weakref.ref[Any]] | None = None
        # Persistent workers keep the dataset copy they started with: (first start, iterations).
        self._workers_first: tuple[int, int] | None = None
        self._workers_iterations = 0
        self._observe = dataset.plan.observe
        self._window = WindowFigures(self._observe.window_steps)
        self._slowest = SlowestRank(self._observe.gather_every)
        self._resume_checks: list[Callable[[Mapping[str, Any]], object]] = []
        # Under an approval's amendments: the amendment dealt under, and how a state of an earlier view resumes.
        self._amendment: AmendmentMark | None = None
        self._translate: Callable[[LoaderState], tuple[LoaderState, Bridge | None]] | None = None

    @property
    def split_dataset(self) -> SplitIterableDataset:
        return self._split_dataset

    @property
    def identity(self) -> OrderIdentity:
        """What fixes this loader's record order (a state resumes only under the same)."""
        return self._identity

    def __len__(self) -> int:
        """Batches this rank gets in a whole epoch."""
        ds = self.split_dataset
        if ds.infinite:
            raise TypeError("an infinite_iter loader has no length")
        return len(ds.schedule(0))

    # -- iteration ----------------------------------------------------------------

    def _next_start(self) -> tuple[int, int]:
        ds = self.split_dataset
        if self._resume or self._started_epoch is None or ds.infinite:
            epoch, position = self._epoch, self._position
        else:
            epoch, position = self._started_epoch + 1, 0
        if ds.total and position >= ds.total:
            epoch, position = epoch + 1, 0
        return epoch, position

    def _history_now(self) -> list[Redeal]:
        """The history, plus the re-dealing point the next ``iter()`` makes if it does not
        continue where the last batch ended with the same batch size, ranks and policy."""
        ds = self.split_dataset
        epoch, position = self._next_start()
        natural = (self._epoch, self._position)
        if ds.total and natural[1] >= ds.total:
            natural = (natural[0] + 1, 0)
        point = self._point(self._step, epoch, position)
        last = self._history[-1] if self._history else None
        if (
            last is not None
            and (epoch, position) == natural
            and (last.batch_size, last.world_size, last.drop_last, last.amendment)
            == (point.batch_size, point.world_size, point.drop_last, point.amendment)
            and point.bridged_from in (None, last.bridged_from)
        ):
            return self._history
        if last is not None and last.step == self._step:
            return [*self._history[:-1], point]  # no step was dealt from the last point
        return [*self._history, point]

    def _point(self, step: int, epoch: int, position: int) -> Redeal:
        """The re-dealing point of a segment this loader deals from `position` of `epoch`."""
        p, bridge = self.split_dataset.plan, self.split_dataset.bridge
        level = None if self._amendment is None else self._amendment.sequence
        source = bridge.source if bridge is not None and bridge.epoch == epoch else None
        return Redeal(step, epoch, position, p.batch_size, p.world_size, p.drop_last, level, source)

    # torch types DataLoader.__iter__ as its private _BaseDataLoaderIter; this one yields the same batches.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds = self.split_dataset
        self._history = self._history_now()
        epoch, position = self._next_start()
        self._resume = False
        self._started_epoch = epoch
        self._epoch, self._position = epoch, position
        if self.persistent_workers and self.num_workers > 0:
            natural = None
            if self._workers_first is not None and not ds.infinite:
                natural = (self._workers_first[0] + self._workers_iterations, 0)
            if self._iterator is not None and natural != (epoch, position):
                if isinstance(self._iterator, _MultiProcessingDataLoaderIter):
                    self._iterator._shutdown_workers()
                self._iterator = None
            if self._iterator is None:
                self._workers_first, self._workers_iterations = (epoch, position), 0
            self._workers_iterations += 1
        ds.set_start(epoch, position)
        live = object()
        if self.num_workers == 0 and not self.pin_memory:
            # In-process without pinning, the DataLoader's iterator only passes the items
            # through (collate is `passthrough`), at ~0.1 ms a batch (its profiler scope
            # and fetcher). Iterate the dataset directly; draw the base seed it would draw,
            # so the caller's torch RNG stream is the same either way.
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            return self._follow(self._reorder(iter(ds), live), live)
        items = super().__iter__()  # starts the workers (with the dataset as set_start left it)
        ds.disarm()  # a DataLoader rebuilt over ds later gets no start: it fails instead of replaying
        return self._follow(self._reorder(items, live), live)

    def set_epoch(self, epoch: int) -> None:
        """Start the next ``iter()`` at the first batch of `epoch` (trainers that number epochs
        call this before each: the Hugging Face Trainer). After `load_state_dict`, the restored
        state must be in `epoch`: else `ResumeStateError` (the trainer and the state disagree on
        where the run is). An ``infinite_iter`` loader runs its own epochs and ignores it."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ConfigurationError(f"set_epoch takes an int >= 0, got {epoch!r}")
        if self.split_dataset.infinite:
            return
        if self._resume:
            restored, _ = self._next_start()
            if restored != epoch:
                raise ResumeStateError(
                    f"the restored loader state is in epoch {restored}, the trainer starts epoch {epoch}: "
                    "resume the trainer and the loader from the same checkpoint"
                )
            return
        self._epoch, self._position, self._resume = epoch, 0, True

    def _follow(self, batches: Iterator[Any], live: object) -> Iterator[Any]:
        self._live = (live, weakref.ref(batches))
        return batches

    def _reorder(self, items: Iterator[Item], live: object) -> Iterator[Any]:
        waiting: dict[int, Item] = {}
        expected = 0
        watch = self._watchdog()
        asked = time.perf_counter()  # when the trainer asked for the next batch
        try:
            for item in items:
                waiting[item[0]] = item
                while expected in waiting:
                    _, epoch, after, batch, worker, stages = waiting.pop(expected)
                    expected += 1
                    self._count(worker, time.perf_counter() - asked, stages)
                    # Counted before the trainer sees the batch: a state taken now includes it.
                    self._epoch, self._position = epoch, after
                    self._step += 1
                    if watch is not None:
                        watch.idle()
                    yield batch
                    asked = time.perf_counter()
                    if watch is not None:
                        watch.busy()
        finally:
            if watch is not None:
                watch.stop()
            if self._live is not None and self._live[0] is live:
                self._live = None
        if waiting:
            raise RuntimeError(
                f"trainvault loader: batch {expected} never arrived while {len(waiting)} later ones did; "
                "a worker stopped early. Nothing after it was yielded"
            )

    def _watchdog(self) -> Watchdog | None:
        """The trainer's process's own watchdog, when workers form the batches (they watch themselves)."""
        o = self._observe
        if o.watchdog_s is None or self.num_workers == 0:
            return None
        where = f"rank {self.split_dataset.plan.rank}, the trainer's process"
        workers = [f"batches from the {self.num_workers} DataLoader workers, which log their own stacks and reads"]
        watch = Watchdog(o.watchdog_s, "log", where, lambda: workers).start()
        watch.busy()
        return watch

    def _count(self, worker: int | str, wait_s: float, stages: tuple[float, ...]) -> None:
        self._window.add(StepFigures(self._step, worker, wait_s, stages, time.perf_counter()))
        self._slowest.maybe_gather(self._step, self._window.total()["data_wait_s"])

    def figures(self) -> dict[str, Any]:
        """What the last step cost, as a dict (numbers and strings only), for a trainer to log.

        ``data_wait_s``: how long the trainer waited for that batch (the exposed data wait).
        ``window``: sums over the last `Observability.window_steps` steps of that wait and of
        the time workers spent per stage (``fetch_s``, ``verify_s``, ``decompress_s``,
        ``decode_s``, ``collate_s``), with ``bytes`` read, ``records`` decoded, ``blocks``,
        ``steps`` and ``wall_s`` (first to last step of the window); ``workers``: the same
        per worker ("main": the trainer's process). ``slowest_rank``: the rank with the most
        window data wait at the last gather (None unless `Observability.gather_every`).
        """
        last = self._window.last()
        ds = self.split_dataset
        return {
            "step": None if last is None else last.step,
            "rank": ds.plan.rank,
            "world_size": ds.plan.world_size,
            "worker": None if last is None else str(last.worker),
            "data_wait_s": 0.0 if last is None else last.wait_s,
            "window": self._window.total(),
            "workers": self._window.per_worker(),
            "slowest_rank": self._slowest.latest,
        }

    # -- state --------------------------------------------------------------------

    def _state(self, step: int | None = None) -> LoaderState:
        ds = self.split_dataset
        # Only points already dealt from: a resume continues at (epoch, position), never
        # at the next epoch a finite loader cut short would start.
        history = self._history or [self._point(0, self._epoch, self._position)]
        epoch, position = self._epoch, self._position
        if step is not None and step != self._step:
            epoch, position = self._position_after(history, step)
        return LoaderState.at(
            self._identity,
            epoch=epoch,
            position=position,
            epoch_records=ds.total,
            remainder=ds.schedule(0).remainder,
            batch_size=ds.plan.batch_size,
            world_size=ds.plan.world_size,
            step=self._step if step is None else step,
            history=tuple(history),
            manifest_uri=self._manifest_uri,
            amendment=self._amendment,
        )

    def _position_after(self, history: list[Redeal], step: int) -> tuple[int, int]:
        """(epoch, position) once `step` batches were received, for a step of the current
        segment (from the last re-dealing point to the last batch yielded)."""
        last = history[-1]
        if not isinstance(step, int) or isinstance(step, bool) or not last.step <= step <= self._step:
            raise ResumeStateError(
                f"a state is taken at a step from {last.step} (where this run last re-dealt) to {self._step} "
                f"(the batches yielded so far), not at {step!r}"
            )
        if step == last.step:
            return last.epoch, last.position
        epoch, batch = step_batch(history, step - 1, self.split_dataset.total, self.split_dataset.plan.rank)
        return epoch, batch.after

    def state_dict(self, step: int | None = None) -> dict[str, Any]:
        """Epoch, records received of it across all ranks, and the digests of the order.

        Take it on any rank between steps; in lockstep training every rank holds the same.
        `step`: the state as it was when the trainer had received `step` batches (a trainer
        that fetches ahead counts fewer than the loader yielded), back to the last re-dealing
        point; default: every batch yielded so far.
        """
        return self._state(step).to_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at `state` on the next ``iter()``: the batches an uninterrupted run would
        have produced next (with another world size or batch size: the rest of the epoch,
        re-dealt, none lost or repeated). Refuses a state of another manifest or selection, and
        raises what a check added by `check_before_resume` raises."""
        for check in self._resume_checks:
            check(state)
        parsed = LoaderState.from_dict(state)
        bridge = None
        if self._translate is not None:
            parsed, bridge = self._translate(parsed)
        parsed.check_identity(self._identity)
        if parsed.epoch_records != self.split_dataset.total:
            raise ResumeStateError(
                f"this state counts {parsed.epoch_records} records an epoch, the selection holds "
                f"{self.split_dataset.total}; it belongs to other data"
            )
        self._epoch, self._position = parsed.epoch, parsed.position
        self._resume = True
        self._live = None  # the next batches are the resumed run's, not the old iteration's
        step, history = parsed.run_history()
        self._step, self._history = step, list(history)
        if bridge is not self.split_dataset.bridge:
            self.split_dataset.bridge = bridge
            self._workers_first = None  # persistent workers hold the dataset as it was: start them again

    def deal_under(
        self, amendment: AmendmentMark, translate: Callable[[LoaderState], tuple[LoaderState, Bridge | None]]
    ) -> None:
        """Name `amendment` in every state from now on, and pass each resumed state through
        `translate` (the approved loader: a state of an earlier view becomes one of this view,
        with the bridge that deals the rest of its epoch) before it is checked."""
        self._amendment = amendment
        self._translate = translate

    def check_before_resume(self, check: Callable[[Mapping[str, Any]], object]) -> None:
        """Run `check(state)` at every `load_state_dict`, before the state is parsed: whoever issued this
        loader (the approved factory: is the approval still unrevoked?) may refuse the resume."""
        self._resume_checks.append(check)

    # -- provenance ---------------------------------------------------------------

    def trace(self, step: int, rank: int | None = None, *, read: bool = True) -> list[TracedRecord]:
        """The records of `step`'s batch (step 0: the first batch this run yielded; steps
        count on across epochs and resumes) for this loader's rank or `rank`, in batch
        order. `read=False` skips reading the records: ``id`` is then None. A step not yet
        yielded is the one an uninterrupted iteration would yield (the one in progress, else
        the next ``iter()``)."""
        return list(self.trace_step(step, rank, read=read).records)

    def trace_step(self, step: int, rank: int | None = None, *, read: bool = True) -> StepTrace:
        """`trace` with the step's epoch and, when `read`, the records themselves (verified)."""
        ds = self.split_dataset
        # While an iteration runs, its next batches continue it; else they are the next iter()'s.
        running = self._live is not None and self._live[1]() is not None
        history = self._history if running else self._history_now()
        self._check_traceable(history, step)
        return trace_batch(ds, self._identity.split, history, step, ds.plan.rank if rank is None else rank, read=read)

    def _check_traceable(self, history: list[Redeal], step: int) -> None:
        """Refuse a step dealt under another amendment's view or bridge than this loader holds."""
        if not history or not isinstance(step, int) or step < history[0].step:
            return  # step_batch says what is wrong
        seg = max((h for h in history if h.step <= step), key=lambda h: h.step)
        level = None if self._amendment is None else self._amendment.sequence
        bridge = self.split_dataset.bridge
        if seg.amendment not in (None, level) or (
            seg.bridged_from is not None and (bridge is None or bridge.epoch != seg.epoch)
        ):
            raise SelectionError(
                f"step {step} was dealt under the view after amendment {seg.amendment}, not this loader's "
                f"(amendment {level}); name what it read with ApprovedDataset.removed_reads(state)"
            )

    def describe_state(self) -> str:
        """Where the run is, for people: epoch, position, selection and digests."""
        return self._state().describe()
