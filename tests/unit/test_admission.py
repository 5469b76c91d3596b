"""router.access.admission: who may set the engine's priority, and what the engine receives."""

from __future__ import annotations

import pytest

from router.access.admission import PriorityOutcome, engine_priority, resolve_priority
from router.config.server import PRIORITY_MAX, PRIORITY_MIN, PriorityGrant
from router.config.tree import ConfigError, parse_config
from router.errors import InvalidRequest
from tests.support.config import router_config

GRANT = PriorityGrant(min=0, max=100, default=10)


@pytest.mark.parametrize("doc,header,grant,default,expected", [
    # untrusted: the client's value is dropped, the configured default (if any) is sent
    ({"priority": 1_000_000}, None, None, None, PriorityOutcome(None, "ignored")),
    ({}, "5", None, None, PriorityOutcome(None, "ignored")),
    ({}, None, None, None, PriorityOutcome(None, "none")),
    ({"priority": None}, None, None, None, PriorityOutcome(None, "none")),
    ({"priority": 2_147_483_647}, None, None, 0, PriorityOutcome(0, "default")),
    ({}, None, None, 3, PriorityOutcome(3, "default")),
    # trusted: its own value within the grant, clamped outside it, the grant's default else
    ({"priority": 42}, None, GRANT, None, PriorityOutcome(42, "client")),
    ({"priority": 1_000_000}, None, GRANT, None, PriorityOutcome(100, "clamped")),
    ({"priority": -5}, None, GRANT, None, PriorityOutcome(0, "clamped")),
    ({}, None, GRANT, None, PriorityOutcome(10, "default")),
    ({}, None, PriorityGrant(), 7, PriorityOutcome(None, "none")),
    ({}, " 77 ", GRANT, None, PriorityOutcome(77, "client")),
    ({"priority": 3}, "77", GRANT, None, PriorityOutcome(3, "client")),  # the body wins
    ({"priority": PRIORITY_MIN}, None, PriorityGrant(), None, PriorityOutcome(PRIORITY_MIN, "client")),
    ({}, "-2147483648", PriorityGrant(), None, PriorityOutcome(PRIORITY_MIN, "client")),
])
def test_resolve_priority(doc, header, grant, default, expected):
    assert resolve_priority(doc, header, grant, default) == expected


@pytest.mark.parametrize("value", ["high", 1.5, 1.0, True, 2**63, PRIORITY_MAX + 1, PRIORITY_MIN - 1, [1], {"v": 1}])
@pytest.mark.parametrize("grant", [None, GRANT])
def test_malformed_body_priority_is_400_for_every_caller(value, grant):
    with pytest.raises(InvalidRequest) as info:
        resolve_priority({"priority": value}, None, grant, None)
    err = info.value
    assert (err.status, err.param, err.code) == (400, "priority", "invalid_priority")


@pytest.mark.parametrize("header", ["high", "1.5", "", "0x10", "9223372036854775808", "2147483648", "٣"])
def test_malformed_priority_header_is_400(header):
    with pytest.raises(InvalidRequest) as info:
        resolve_priority({}, header, GRANT, None)
    assert (info.value.param, info.value.code) == ("priority", "invalid_priority")


def _doc(priority):
    return router_config("/t", "http://127.0.0.1:1", "http://127.0.0.1:2",
                         auth={"api_keys": ["k"], "priority": priority})


@pytest.mark.parametrize("priority,needle", [
    ({"keys": {"a" * 64: {"min": 5, "max": 1}}}, "min must not exceed max"),
    ({"keys": {"a" * 64: {"min": 0, "max": 5, "default": 9}}}, "default must lie within"),
    ({"keys": {"sk-live": {"max": 5}}}, "pattern"),
    ({"keys": {"a" * 64: {"max": 2**31}}}, "less than or equal"),
    ({"default": "high"}, "valid integer"),
    ({"default": 1, "tiers": {}}, "unknown key"),
])
def test_priority_config_is_strict(priority, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_config(_doc(priority))


def test_priority_config_parses():
    cfg = parse_config(_doc({"default": 0, "keys": {"a" * 64: {"min": 0, "max": 9, "default": 5}}}))
    assert cfg.auth.priority.default == 0
    assert cfg.auth.priority.keys["a" * 64] == PriorityGrant(min=0, max=9, default=5)


@pytest.mark.parametrize("value,order,expected", [
    (42, "larger_first", 42), (42, "smaller_first", -42), (0, "smaller_first", 0),
    (PRIORITY_MIN, "smaller_first", PRIORITY_MAX), (PRIORITY_MAX, "smaller_first", -PRIORITY_MAX),
])
def test_engine_priority_follows_the_pools_convention(value, order, expected):
    assert engine_priority(value, order) == expected


def test_tiers_keep_their_rank_on_both_conventions():
    low, high = 0, 100  # a low-tier key pinned to 0, a trusted one asking for 100
    for order in ("larger_first", "smaller_first"):
        a, b = engine_priority(low, order), engine_priority(high, order)
        assert (b > a) if order == "larger_first" else (b < a)  # the engine schedules b first


def test_pool_priority_order_is_strict():
    doc = router_config("/t", "http://127.0.0.1:1", "http://127.0.0.1:2", **{"pools.1.priority_order": "lowest"})
    with pytest.raises(ConfigError, match="priority_order"):
        parse_config(doc)
