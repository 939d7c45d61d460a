"""Bad input for the public API, and the check every walk over it makes.

The property: a call either works or raises a `TrainVaultError` subclass naming what is wrong;
a `TypeError` only for an argument of the wrong type. Never a bare `ValueError`, `KeyError`,
`AttributeError`, `IndexError` or `AssertionError`, and never a panic of the storage client (a
`BaseException`, which would pass every ``except Exception``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from trainvault import TrainVault, TrainVaultError

CHECK = settings(
    max_examples=40,
    deadline=10_000,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
NAMES = st.text(max_size=12) | st.text("abc._-/ ", min_size=1, max_size=6) | st.sampled_from(["", ".", "..", "x" * 129])


def outcome(call: Callable[[], Any], *, type_errors: bool = False) -> TrainVaultError | TypeError | None:
    """None when `call` works, else the typed error it raised. A `TypeError` passes only with
    `type_errors` (a wrong argument type was given); anything else propagates and fails the test."""
    try:
        call()
    except TrainVaultError as exc:
        return exc
    except TypeError as exc:
        if type_errors:
            return exc
        raise AssertionError(f"a TypeError for values of the right types: {exc!r}") from exc
    return None


def refused(call: Callable[[], Any], kind: type[BaseException] = TrainVaultError) -> BaseException:
    got = outcome(call, type_errors=kind is TypeError)
    assert isinstance(got, kind), f"expected {kind.__name__}, got {got!r}"
    return got


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document (the root included)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, (*prefix, i))


def replaced(doc: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> Any:
    """A copy of `doc` with the value at `path` replaced (or, with `delete` and a dict parent, removed)."""
    if not path:
        return value
    out = json.loads(json.dumps(doc))
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@st.composite
def mutations(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with one place replaced by an arbitrary JSON value, or one field removed."""
    path = draw(st.sampled_from(list(paths(doc))))
    return replaced(doc, path, draw(JSON), delete=draw(st.booleans()))


RECORD_VALUES = (
    JSON
    | st.binary(max_size=8)
    | st.integers(min_value=2**63, max_value=2**80)
    | st.just(float("nan"))
    | st.builds(object)
    | st.sets(st.integers(), max_size=2)
)


def memory_root() -> str:
    return f"memory://{uuid.uuid4().hex}"


def put_json(vault: TrainVault, value: Any) -> str:
    uri = f"{memory_root()}/doc.json"
    vault.storage.put_create(uri, json.dumps(value).encode())
    return uri
