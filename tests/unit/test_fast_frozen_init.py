"""router.request.features.fast_frozen_init: the same __init__ as the dataclass's own (parameters,
defaults, result), the class still frozen; the classes of the request path use it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from router.decision.policy import Decision, Outcome, Reason
from router.request.features import Rendered, RequestFeatures, fast_frozen_init


@dataclasses.dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "b"
    c: tuple[int, ...] = ()
    d: object = dataclasses.field(default=None, compare=False)


@fast_frozen_init
@dataclasses.dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: str = "b"
    c: tuple[int, ...] = ()
    d: object = dataclasses.field(default=None, compare=False)


def test_same_parameters_defaults_and_values_as_the_dataclass_init() -> None:
    assert str(inspect.signature(Fast)) == str(inspect.signature(Plain))
    for args, kwargs in [((1,), {}), ((1, "x", (2,), 3), {}), ((), {"a": 1, "d": 4}), ((1,), {"c": (5,)})]:
        fast, plain = Fast(*args, **kwargs), Plain(*args, **kwargs)
        assert [getattr(fast, f.name) for f in dataclasses.fields(Fast)] == [
            getattr(plain, f.name) for f in dataclasses.fields(Plain)]
    with pytest.raises(TypeError):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, b="x", e=2)  # type: ignore[call-arg]


def test_still_frozen_equal_hashable_and_replaceable() -> None:
    x = Fast(1, d=object())
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.a = 2  # type: ignore[misc]
    assert x == Fast(1) and hash(x) == hash(Fast(1))
    assert dataclasses.replace(x, b="y") == Fast(1, "y")


def test_refuses_what_it_does_not_handle() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        a: int

    for cls in (Factory, KwOnly):
        with pytest.raises(TypeError):
            fast_frozen_init(cls)


def test_the_request_path_classes_use_it() -> None:
    for cls in (RequestFeatures, Rendered, Decision):
        assert "_set_" in cls.__init__.__code__.co_names[0]
    d = Decision("plain", "http://e", Reason.PLAIN_ONLY)
    assert (d.outcome, d.predicted, d.endpoint_reason, d.basis) == (Outcome.ROUTED, (), None, None)
    assert RequestFeatures(5, 6).prompt_exact
