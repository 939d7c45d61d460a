"""The Hugging Face Trainer on trainvault's loaders (transformers and accelerate as released):
with `TrainVaultTrainerMixin` a killed run resumes with the uninterrupted run's batches (gradient
accumulation with a short last step, both epochs, another num_workers, a trainer that fetches
ahead); without it the Trainer's default resume is refused with a typed error before any batch
reaches the model, and a checkpoint without the loader's state is refused by the mixin."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Trainer, TrainingArguments

from trainvault import TrainVault, UngatedDataWarning
from trainvault.errors import ConfigurationError, ResumeStateError
from trainvault.loading.hf import STATE_FILE, TrainVaultTrainerMixin

#: 4 shards x 40 records in batches of 6: 27 batches an epoch (the last of 4 records), 14 optimizer
#: steps of 2 batches each (the last of one), two epochs; a checkpoint every 4 optimizer steps.
BATCH, GA, PER_EPOCH, UPDATES, EPOCHS, SAVE_STEPS = 6, 2, 27, 14, 2, 4
WORKER_TIMEOUT_S = 120


class Killed(Exception):
    """Stands for the process dying mid-run."""


def collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": [r["id"] for r in records], "x": torch.tensor([[r["tokens"] / 100.0] for r in records])}


class Model(torch.nn.Module):
    """One linear layer; records the ids of every batch it is called with."""

    def __init__(self, kill_after: int | None = None):
        super().__init__()
        self.w = torch.nn.Linear(1, 1)
        self.seen: list[list[str]] = []
        self.kill_after = kill_after

    def forward(self, x: torch.Tensor, id: list[str]) -> dict[str, torch.Tensor]:
        if self.kill_after is not None and len(self.seen) == self.kill_after:
            raise Killed
        self.seen.append(list(id))
        return {"loss": self.w(x).pow(2).mean()}


class LoaderTrainer(Trainer):
    """The plain override transformers' docs suggest for a custom loader."""

    def __init__(self, *args: Any, loader: Any, **kwargs: Any):
        self.loader = loader
        super().__init__(*args, **kwargs)

    def get_train_dataloader(self) -> Any:
        return self.loader


class ResumingTrainer(TrainVaultTrainerMixin, LoaderTrainer):
    pass


class FetchingAheadTrainer(ResumingTrainer):
    """A trainer that takes one batch more from the loader than it trains on (a prefetch)."""

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        buffer = self.__dict__.setdefault("_ahead", {}).setdefault(id(epoch_iterator), [])
        while len(buffer) < num_batches + 1:
            try:
                buffer.append(next(epoch_iterator))
            except StopIteration:
                break
        taken = buffer[:num_batches]
        del buffer[:num_batches]
        return taken, None


def arguments(out: Path, **overrides: Any) -> TrainingArguments:
    options = {
        "output_dir": str(out),
        "num_train_epochs": EPOCHS,
        "gradient_accumulation_steps": GA,
        "save_strategy": "steps",
        "save_steps": SAVE_STEPS,
        "logging_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
        "learning_rate": 0.01,
        **overrides,
    }
    return TrainingArguments(**options)


@pytest.fixture(scope="module")
def data(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path_factory.mktemp("hf")), shards=4, records_per_shard=40)
    return chain, chain.vault.approve_dataset(chain.request())


def loader_maker(kind: str, data: Any) -> Callable[[int], Any]:
    chain, approved = data

    def load(workers: int) -> Any:
        args = {"batch_size": BATCH, "num_workers": workers, **({"timeout": WORKER_TIMEOUT_S} if workers else {})}
        options = {"collate_fn": collate, "dataloader_args": args, "shuffle": True, "seed": 3}
        if kind == "approved":
            return approved.loader_factory(**options).load("train")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UngatedDataWarning)
            return chain.vault.ungated_loader_factory(chain.manifest_uri, **options).load("train")

    return load


@pytest.fixture(scope="module")
def uninterrupted(data: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[str]]]:
    runs = {}
    for kind in ("ungated", "approved"):
        model = Model()
        out = tmp_path_factory.mktemp(f"whole-{kind}")
        ResumingTrainer(model=model, args=arguments(out), loader=loader_maker(kind, data)(0)).train()
        runs[kind] = model.seen
    return runs


def batches_at(global_step: int) -> int:
    epochs, rest = divmod(global_step, UPDATES)
    return epochs * PER_EPOCH + rest * GA


@pytest.mark.parametrize(
    ("kind", "kill_after", "saved"),
    [("ungated", 21, 8), ("approved", 43, 20)],
    ids=["ungated-epoch-1", "approved-epoch-2"],
)
def test_a_killed_run_resumes_with_the_uninterrupted_batches(
    data: Any, uninterrupted: dict[str, list[list[str]]], tmp_path: Path, kind: str, kill_after: int, saved: int
) -> None:
    whole = uninterrupted[kind]
    assert len(whole) == EPOCHS * PER_EPOCH and whole[:PER_EPOCH] != whole[PER_EPOCH:]
    load = loader_maker(kind, data)
    first = Model(kill_after=kill_after)
    with pytest.raises(Killed):
        ResumingTrainer(model=first, args=arguments(tmp_path), loader=load(0)).train()
    assert first.seen == whole[:kill_after]
    checkpoint = tmp_path / f"checkpoint-{saved}"
    assert json.loads((checkpoint / STATE_FILE).read_text())["step"] == batches_at(saved)
    resumed = Model()
    ResumingTrainer(model=resumed, args=arguments(tmp_path), loader=load(2)).train(
        resume_from_checkpoint=str(checkpoint)
    )
    assert resumed.seen == whole[batches_at(saved) :]


def test_a_trainer_that_fetches_ahead_saves_the_state_of_what_it_trained_on(
    data: Any, uninterrupted: dict[str, list[list[str]]], tmp_path: Path
) -> None:
    whole, load = uninterrupted["ungated"], loader_maker("ungated", data)
    first = Model(kill_after=21)
    with pytest.raises(Killed):
        FetchingAheadTrainer(model=first, args=arguments(tmp_path), loader=load(0)).train()
    assert first.seen == whole[:21]
    # At step 8 the loader had yielded 17 batches; the state counts the 16 the trainer trained on.
    assert json.loads((tmp_path / "checkpoint-8" / STATE_FILE).read_text())["step"] == 16
    resumed = Model()
    ResumingTrainer(model=resumed, args=arguments(tmp_path), loader=load(0)).train(resume_from_checkpoint=True)
    assert resumed.seen == whole[16:]


@pytest.fixture
def plain_checkpoint(data: Any, tmp_path: Path) -> Path:
    """A checkpoint at optimizer step 4 (8 batches into the first epoch) written without the mixin."""
    model = Model()
    LoaderTrainer(model=model, args=arguments(tmp_path, max_steps=4), loader=loader_maker("ungated", data)(0)).train()
    assert not (tmp_path / "checkpoint-4" / STATE_FILE).exists()
    return tmp_path / "checkpoint-4"


@pytest.mark.parametrize("workers", [0, 2])
def test_the_plain_override_is_refused_at_resume_before_the_model_sees_a_batch(
    data: Any, plain_checkpoint: Path, workers: int
) -> None:
    model = Model()
    trainer = LoaderTrainer(
        model=model, args=arguments(plain_checkpoint.parent), loader=loader_maker("ungated", data)(workers)
    )
    # accelerate's skip_first_batches rebuilds a plain DataLoader over loader.dataset: trainvault refuses it.
    with pytest.raises(ConfigurationError, match="TrainVaultTrainerMixin"):
        trainer.train(resume_from_checkpoint=str(plain_checkpoint))
    assert model.seen == []


def test_the_mixin_refuses_a_checkpoint_without_the_loader_state(data: Any, plain_checkpoint: Path) -> None:
    model = Model()
    trainer = ResumingTrainer(
        model=model, args=arguments(plain_checkpoint.parent), loader=loader_maker("ungated", data)(0)
    )
    with pytest.raises(ResumeStateError, match=STATE_FILE):
        trainer.train(resume_from_checkpoint=str(plain_checkpoint))
    assert model.seen == []


def test_the_mixin_refuses_a_state_of_another_step_a_damaged_one_and_ignore_data_skip(
    data: Any, plain_checkpoint: Path
) -> None:
    load = loader_maker("ungated", data)
    loader = load(0)
    for _ in zip(range(3), loader, strict=False):
        pass
    state = plain_checkpoint / STATE_FILE
    state.write_text(json.dumps(loader.state_dict()))  # 3 batches, the Trainer resumes after 8
    cases = [
        ({}, ResumeStateError, "at step 3, the Trainer resumes after 8 batches"),
        ({"ignore_data_skip": True}, ConfigurationError, "ignore_data_skip=False"),
    ]
    for overrides, error, message in cases:
        model = Model()
        args = arguments(plain_checkpoint.parent, **overrides)
        with pytest.raises(error, match=message):
            ResumingTrainer(model=model, args=args, loader=load(0)).train(resume_from_checkpoint=str(plain_checkpoint))
        assert model.seen == []
    state.write_text('{"format": "trainvault.loader-state", ')
    with pytest.raises(ResumeStateError, match="damaged"):
        ResumingTrainer(model=Model(), args=arguments(plain_checkpoint.parent), loader=load(0)).train(
            resume_from_checkpoint=str(plain_checkpoint)
        )


def test_the_mixin_refuses_a_loader_that_is_not_trainvaults(tmp_path: Path) -> None:
    records = [{"id": f"r{i}", "tokens": i} for i in range(24)]
    plain = torch.utils.data.DataLoader(records, batch_size=BATCH, collate_fn=collate)
    model = Model()
    trainer = ResumingTrainer(model=model, args=arguments(tmp_path, max_steps=SAVE_STEPS), loader=plain)
    with pytest.raises(ConfigurationError, match="get_train_dataloader gave DataLoader: return factory"):
        trainer.train()  # refused at the first checkpoint: its state would not be trainvault's
    assert not (tmp_path / f"checkpoint-{SAVE_STEPS}" / STATE_FILE).exists()


def test_an_infinite_loader_resumes_at_the_trainers_count(data: Any, tmp_path: Path) -> None:
    chain, _ = data

    def load() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UngatedDataWarning)
            factory = chain.vault.ungated_loader_factory(
                chain.manifest_uri, collate_fn=collate, shuffle=True, seed=3, dataloader_args={"batch_size": BATCH}
            )
        return factory.load("train", infinite_iter=True)

    # 40 optimizer steps of 2 batches: 80 batches, past the end of the first epoch (27 batches).
    whole = Model()
    ResumingTrainer(model=whole, args=arguments(tmp_path / "whole", max_steps=40), loader=load()).train()
    first = Model(kill_after=70)
    with pytest.raises(Killed):
        ResumingTrainer(model=first, args=arguments(tmp_path, max_steps=40), loader=load()).train()
    resumed = Model()
    trainer = ResumingTrainer(model=resumed, args=arguments(tmp_path, max_steps=40), loader=load())
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-32"))
    assert len(whole.seen) == 80 and resumed.seen == whole.seen[64:]
