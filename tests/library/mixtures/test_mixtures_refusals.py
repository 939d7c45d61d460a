"""No silent resume of a mixture run: each mismatch is refused with a typed error naming it,
and the refused loader still deals what it dealt before."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainvault import TrainVault  # noqa: E402
from trainvault.errors import ConfigurationError, ResumeStateError, SelectionError, TrainVaultError  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402
from trainvault.mixtures import Mixture, MixtureComponent, load_mixture  # noqa: E402


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


def save(root: Path, sizes: tuple[int, ...]) -> str:
    uri = str(root / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=100)
    for i, n in enumerate(sizes):
        saver.save("train", f"st{i}", [{"id": i * 1000 + k, "text": f"r{k}"} for k in range(n)], shard_id="s0")
    saver.commit_manifest()
    return uri


@pytest.fixture(scope="module")
def uris(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return save(tmp_path_factory.mktemp("a"), (20, 30, 9)), save(tmp_path_factory.mktemp("b"), (20, 30, 9, 4))


MIX = Mixture("train", [MixtureComponent("a", 2, "st0"), MixtureComponent("b", 1, "st1")])
LATER = Mixture("train", [MixtureComponent("a", 1, "st0"), MixtureComponent("c", 1, "st2", run_out="drop")])


def sdl(uri: str, **kw: Any) -> SplitLoaderFactory:
    exclude = kw.pop("exclude", None)
    opts = {"shuffle": True, "seed": 5, "shuffle_window_blocks": 2, **kw}
    plan = LoaderPlan.create(collate_fn=ids, dataloader_args={"batch_size": 4}, **opts)
    return SplitLoaderFactory(TrainVault().storage, uri, plan, exclude=exclude)


def saved_state(uri: str) -> dict[str, Any]:
    ld = load_mixture(sdl(uri), MIX)
    ld.set_mixture(LATER, at_step=3)
    list(itertools.islice(iter(ld), 5))
    return ld.state_dict()


def tampered(edit: Callable[[dict[str, Any]], None]) -> Callable[[str, str], tuple[Any, Any]]:
    def case(uri: str, other: str) -> tuple[Any, Any]:
        state = copy.deepcopy(saved_state(uri))
        edit(state)
        return load_mixture(sdl(uri), MIX), state

    return case


def resume(make: Callable[[str, str], tuple[Any, Any]]) -> Callable[[str, str], None]:
    def run(uri: str, other: str) -> None:
        loader, state = make(uri, other)
        loader.load_state_dict(state)

    return run


def _iterated(uri: str, other: str) -> tuple[Any, Any]:
    ld = load_mixture(sdl(uri), MIX)
    next(iter(ld))
    return ld, saved_state(uri)


def _revised_first(uri: str, other: str) -> tuple[Any, Any]:
    ld = load_mixture(sdl(uri), MIX)
    ld.set_mixture(Mixture("train", [MixtureComponent("b", 1, "st1")]), at_step=2)
    return ld, saved_state(uri)


def _excluding(uri: str, other: str) -> tuple[Any, Any]:
    key = TrainVault().load_manifest(uri).splits["train"].shards[0].key
    return load_mixture(sdl(uri, exclude={key: [0, 1]}), MIX), saved_state(uri)


def _split_state(uri: str, other: str) -> tuple[Any, Any]:
    plain = sdl(uri).load("train")
    next(iter(plain))
    return load_mixture(sdl(uri), MIX), plain.state_dict()


def _into_split_loader(uri: str, other: str) -> None:
    sdl(uri).load("train").load_state_dict(saved_state(uri))


def _revise(at_step: int, mix: Mixture, steps: int = 4) -> Callable[[str, str], None]:
    def run(uri: str, other: str) -> None:
        ld = load_mixture(sdl(uri), MIX)
        list(itertools.islice(iter(ld), steps))
        ld.set_mixture(LATER, at_step=6)
        ld.set_mixture(mix, at_step=at_step)

    return run


def _finite_then_revise(uri: str, other: str) -> None:
    only = Mixture("train", [MixtureComponent("c", 1, "st2", run_out="drop")])  # 9 records: 3 steps
    load_mixture(sdl(uri), only).set_mixture(MIX, at_step=4)


def _set_field(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s.__setitem__(name, value)


CASES: dict[str, tuple[type[TrainVaultError], str, Callable[[str, str], None]]] = {
    "another manifest": (
        ResumeStateError,
        "manifest",
        resume(lambda u, o: (load_mixture(sdl(o), MIX), saved_state(u))),
    ),
    "another first mixture": (
        ResumeStateError,
        "mixture history",
        resume(
            lambda u, o: (load_mixture(sdl(u), Mixture("train", [MixtureComponent("a", 1, "st0")])), saved_state(u))
        ),
    ),
    "a revision the state lacks": (ResumeStateError, "mixture history", resume(_revised_first)),
    "another seed": (
        ResumeStateError,
        "seed",
        resume(lambda u, o: (load_mixture(sdl(u, seed=6), MIX), saved_state(u))),
    ),
    "shuffle off": (
        ResumeStateError,
        "shuffle",
        resume(lambda u, o: (load_mixture(sdl(u, shuffle=False), MIX), saved_state(u))),
    ),
    "another window": (
        ResumeStateError,
        "shuffle_window_blocks",
        resume(lambda u, o: (load_mixture(sdl(u, shuffle_window_blocks=3), MIX), saved_state(u))),
    ),
    "changed exclusions": (ResumeStateError, "component 'a'", resume(_excluding)),
    "iter() before load_state_dict": (ResumeStateError, "fresh loader", resume(_iterated)),
    "a split loader's state": (ResumeStateError, "split loader", resume(_split_state)),
    "a mixture state into a split loader": (ResumeStateError, "loader state", _into_split_loader),
    "position off its history": (ResumeStateError, "does not follow", resume(tampered(_set_field("position", 21)))),
    "step past the stream's end": (ResumeStateError, "does not follow", resume(tampered(_set_field("step", 10**6)))),
    "a revision at the first slot": (
        ResumeStateError,
        "out of order",
        resume(tampered(lambda s: s["revisions"][1].__setitem__("at_slot", 0))),
    ),
    "revisions out of order": (
        ResumeStateError,
        "out of order",
        resume(tampered(lambda s: s["revisions"].append({**s["revisions"][1], "at_step": 100, "at_slot": 1}))),
    ),
    "a newer state version": (ResumeStateError, "version", resume(tampered(_set_field("version", 2)))),
    "a component its revisions do not name": (
        ResumeStateError,
        "components",
        resume(tampered(lambda s: s["components"].pop("c"))),
    ),
    "not a state": (ResumeStateError, "mixture state", resume(lambda u, o: (load_mixture(sdl(u), MIX), [1, 2]))),
    # A later revision of a damaged state that redefines a component, or names a stage the split lacks.
    "a later revision that moves a component's stage": (
        ResumeStateError,
        "keeps its stage",
        resume(tampered(lambda s: s["revisions"][1]["mixture"]["components"][0].__setitem__("stage", "st1"))),
    ),
    "a later revision that changes a component's replacement": (
        ResumeStateError,
        "keeps its stage",
        resume(tampered(lambda s: s["revisions"][1]["mixture"]["components"][0].__setitem__("replacement", True))),
    ),
    "a later revision over a stage the split lacks": (
        ResumeStateError,
        "'st9'",
        resume(tampered(lambda s: s["revisions"][1]["mixture"]["components"][1].__setitem__("stage", "st9"))),
    ),
    "revision at a step already passed": (SelectionError, "in the past", _revise(3, LATER)),
    "revision not after the last one": (SelectionError, "not after the last revision", _revise(6, MIX)),
    "revision over a stage the split lacks": (
        SelectionError,
        "'st9'",
        _revise(8, Mixture("train", [MixtureComponent("z", 1, "st9")])),
    ),
    "revision over another split": (
        SelectionError,
        "another run",
        _revise(8, Mixture("valid", [MixtureComponent("a", 1, "st0")])),
    ),
    "component redefined": (
        ConfigurationError,
        "keeps its stage",
        _revise(8, Mixture("train", [MixtureComponent("a", 1, "st0", replacement=True)])),
    ),
    "revision after the stream's end": (SelectionError, "stream's end", _finite_then_revise),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mixture_refuses(uris: tuple[str, str], name: str) -> None:
    error, words, case = CASES[name]
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        case(*uris)
    assert type(info.value) is error or issubclass(type(info.value), error)
    if "later revision" in name:  # what the state's history ran into, kept as the cause
        assert isinstance(info.value.__cause__, (ConfigurationError, SelectionError))


def test_a_refused_resume_leaves_the_loader_as_it_was(uris: tuple[str, str]) -> None:
    fresh = load_mixture(sdl(uris[0]), MIX)
    expect = list(itertools.islice(iter(fresh), 6))
    ld = load_mixture(sdl(uris[0]), MIX)
    with pytest.raises(ResumeStateError):
        ld.load_state_dict(load_mixture(sdl(uris[1]), MIX).state_dict())
    assert list(itertools.islice(iter(ld), 6)) == expect


def test_weights_and_components_are_checked() -> None:
    for bad in (0, -1, float("nan"), True, "1"):
        with pytest.raises(ConfigurationError, match="weight"):
            MixtureComponent("a", bad, "st0")
    with pytest.raises(ConfigurationError, match="run_out"):
        MixtureComponent("a", 1, "st0", run_out="cycle")
    with pytest.raises(ConfigurationError, match="twice"):
        Mixture("train", [MixtureComponent("a", 1), MixtureComponent("a", 2)])
    with pytest.raises(ConfigurationError, match="non-empty"):
        Mixture("train", [])
