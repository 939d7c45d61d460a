"""The Hugging Face Trainer on a trainvault loader: each checkpoint folder holds the loader's
state, and a resumed run restores it instead of reading and discarding the batches before.

``class MyTrainer(TrainVaultTrainerMixin, transformers.Trainer)`` with a `get_train_dataloader`
that returns ``factory.load(split)``. On each save the mixin writes the loader's state, taken at
the batches the Trainer counted (its ``global_step`` times the accumulation steps, per epoch), as
`STATE_FILE` beside the Trainer's own files; `train(resume_from_checkpoint=...)` loads it before
the first batch, checks it stands where the Trainer resumes, and hands the Trainer the loader
itself where it would skip batches. The Trainer's ``set_epoch`` reaches the loader.
transformers is imported when a trainer with the mixin is made, never by the library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from trainvault.errors import ConfigurationError, ResumeStateError
from trainvault.extras import require

if TYPE_CHECKING:
    from trainvault.loading.loader import TrainVaultDataLoader

#: The loader state's file in each checkpoint folder.
STATE_FILE: Final = "trainvault_loader_state.json"


class TrainVaultTrainerMixin:
    """Put it before `transformers.Trainer` (or a subclass) in the bases: checkpoints carry the
    trainvault loader's state and a resume continues from it, exactly and without re-reading."""

    _trainvault_resume: str | None = None
    _trainvault_restored = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the Trainer's arguments, for the class after this one
        trainer: Any = self
        trainer.add_callback(_checkpoint_callback(self))

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """`transformers.Trainer.train`, remembering the checkpoint folder the loader resumes from."""
        trainer: Any = self
        folder = resume_from_checkpoint
        if folder is True:
            folder = require("transformers.trainer_utils", "hf").get_last_checkpoint(trainer.args.output_dir)
        self._trainvault_resume = str(folder) if folder else None
        self._trainvault_restored = False
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """The loader itself, already restored at the Trainer's step: nothing is read to skip."""
        loader = _trainvault_loader(dataloader)
        if not self._trainvault_restored:
            raise ResumeStateError(
                f"the Trainer resumes {num_batches} batches into an epoch but no trainvault loader state was "
                "restored; resume with train(resume_from_checkpoint=<checkpoint folder>)"
            )
        return loader


def _trainvault_loader(dataloader: Any) -> TrainVaultDataLoader:
    """`dataloader` when it is a trainvault loader; else a `ConfigurationError` (a wrapped or
    rebuilt loader would not carry trainvault's state)."""
    from trainvault.loading.loader import TrainVaultDataLoader

    if not isinstance(dataloader, TrainVaultDataLoader):
        raise ConfigurationError(
            f"TrainVaultTrainerMixin resumes a trainvault loader; get_train_dataloader gave "
            f"{type(dataloader).__name__}: return factory.load(split) itself, not wrapped or prepared"
        )
    return dataloader


def _trainer_batches(global_step: int, loader: TrainVaultDataLoader, accumulation: int) -> int:
    """Batches the Trainer took from `loader` for `global_step` optimizer steps: whole epochs of
    ``len(loader)`` batches (the last step of each takes the remainder), then the current one's."""
    if loader.split_dataset.infinite:
        return global_step * accumulation
    per_epoch = len(loader)
    updates = max(per_epoch // accumulation + int(per_epoch % accumulation > 0), 1)
    epochs, rest = divmod(global_step, updates)
    return epochs * per_epoch + min(rest * accumulation, per_epoch)


def _save_state(args: Any, state: Any, dataloader: Any) -> None:
    """Write the loader's state at the Trainer's count into the checkpoint folder just saved."""
    loader = _trainvault_loader(dataloader)
    doc = loader.state_dict(step=_trainer_batches(state.global_step, loader, args.gradient_accumulation_steps))
    if not state.is_world_process_zero:
        return  # every rank holds the same state; the first writes it
    prefix = require("transformers.trainer_utils", "hf").PREFIX_CHECKPOINT_DIR
    folder = Path(args.output_dir) / f"{prefix}-{state.global_step}"
    if not folder.is_dir():
        raise ConfigurationError(f"the Trainer saved no checkpoint folder {folder}; the loader state has no place")
    tmp = folder / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, folder / STATE_FILE)  # a half-written state is never seen


def _restore_state(folder: str, args: Any, state: Any, dataloader: Any) -> None:
    """Load `folder`'s loader state into the loader; refuse one that is not where the Trainer resumes."""
    loader = _trainvault_loader(dataloader)
    if args.ignore_data_skip:
        raise ConfigurationError(
            "TrainVaultTrainerMixin restores the loader instead of skipping batches, and the Trainer counts its "
            "resumed epoch right only with ignore_data_skip=False: leave it False"
        )
    path = Path(folder) / STATE_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResumeStateError(
            f"checkpoint {folder} holds no trainvault loader state ({STATE_FILE}): it was saved without "
            "TrainVaultTrainerMixin, so its data position is unknown; resume from a checkpoint the mixin saved"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResumeStateError(f"{path} cannot be read as a loader state ({exc}); it is damaged") from None
    loader.load_state_dict(doc)
    expected = _trainer_batches(state.global_step, loader, args.gradient_accumulation_steps)
    if doc.get("step") != expected:
        raise ResumeStateError(
            f"{path} is at step {doc.get('step')!r}, the Trainer resumes after {expected} batches "
            f"(global step {state.global_step}); the state belongs to another checkpoint"
        )


def _checkpoint_callback(trainer: TrainVaultTrainerMixin) -> Any:
    """The TrainerCallback that saves and restores the state (made here: it subclasses transformers')."""
    base: Any = require("transformers", "hf").TrainerCallback

    class LoaderCheckpoint(base):  # type: ignore[misc]  # transformers is not typed for the library
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = trainer._trainvault_resume
            if folder is not None:
                _restore_state(folder, args, state, kwargs.get("train_dataloader"))
                trainer._trainvault_restored = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            _save_state(args, state, kwargs.get("train_dataloader"))

    return LoaderCheckpoint()
