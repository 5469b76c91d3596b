"""Every copy of the reason and capability names matches the one table (router.reasons).

The table is :class:`router.reasons.Reason`; the copies a reader meets elsewhere are the Helm
schema's enum of ``pools[].capabilities`` and the operator guide's table of kinds (both in the
table's order, the order a pool's first missing kind is reported), the README's decision table
(every reason but the capability kinds, which it leaves to the operator guide's table), the
triggers of router.request.capabilities and the config check. Changing one copy by hand fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from router.config.tree import ConfigError, parse_config
from router.reasons import CAPABILITY_KINDS, Reason, capability_kind
from router.request import capabilities
from router.request.parsing import ParsedRequest

ROOT = Path(__file__).resolve().parents[2]


def _table_rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the Markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", cell))


def test_capability_kinds_are_the_tables():
    assert capabilities.KINDS == tuple(k.value for k in CAPABILITY_KINDS)
    assert capabilities.KINDS, "the table has no capability kind"
    assert all(Reason(k).capability for k in capabilities.KINDS)
    assert tuple(capabilities.TRIGGERS) == capabilities.KINDS   # one trigger each, none else


def test_helm_schema_enum_matches_the_table():
    schema = json.loads((ROOT / "helm/specgate/values.schema.json").read_text())
    enums = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "capabilities" in node and isinstance(node["capabilities"], dict):
                enums.append(node["capabilities"]["items"]["enum"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    assert enums, "no capabilities enum in the Helm schema"
    for enum in enums:
        assert tuple(enum) == capabilities.KINDS


def test_readme_decision_table_names_every_reason():
    rows = _table_rows((ROOT / "README.md").read_text(), "| condition (checked in this order)")
    named = set().union(*(_names(r[2]) for r in rows))
    # the capability kinds are not listed by hand: a reason cell "the kind" pointing to the
    # operator guide's table of kinds (pinned below) stands for them all
    assert not named & set(capabilities.KINDS), "README names capability kinds: point to the operator guide"
    assert [r[2] for r in rows if r[2].startswith("the kind")], "no README row stands for the capability kinds"
    assert all("docs/operator-guide.md" in r[0] + r[2] for r in rows if r[2].startswith("the kind"))
    assert named | set(capabilities.KINDS) == {r.value for r in Reason}


def test_operator_guide_kind_table_matches_the_table():
    rows = _table_rows((ROOT / "docs/operator-guide.md").read_text(), "| kind (decision reason)")
    assert tuple(next(iter(_names(r[0]))) for r in rows) == capabilities.KINDS


def test_config_accepts_exactly_the_capability_kinds():
    for kind in capabilities.KINDS:
        assert capability_kind(kind) is Reason(kind)
    for bad in ("speculative", "no_such_kind", "Logprobs"):
        with pytest.raises(ValueError, match="unknown kind"):
            capability_kind(bad)
    with pytest.raises(ConfigError, match="unknown kind 'no_such_kind'"):
        _config(["no_such_kind"])
    cfg = _config(list(capabilities.KINDS))
    assert cfg.pools[0].served_capabilities == frozenset(capabilities.KINDS)


def _config(kinds: list[str]):
    return parse_config({
        "model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
        "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"], "capabilities": kinds},
                  {"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:2"]}]})


def _parsed(doc: dict) -> ParsedRequest:
    return ParsedRequest("chat", doc, None, 1, False, "messages")


def _decide_doc(doc: dict, pools: list, speculation: str = "auto"):
    """The decision for a chat body ``doc`` (100-token prompt, budget 100) over ``pools``."""

    from router.decision.policy import Rules, decide
    from router.request.features import RequestFeatures

    features = RequestFeatures(prompt_tokens=100, max_new_tokens=100, speculation=speculation,
                               needs=capabilities.required_features(_parsed(doc)),
                               prefers=capabilities.preferred_features(doc))
    rules = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)
    return decide(features, pools, rules)


def _pools(plain_healthy: bool = True) -> list:
    from router.decision.policy import EndpointSnapshot, PoolSnapshot

    return [PoolSnapshot("spec", True, 2048, 4, (EndpointSnapshot("http://s0", True, 0),), capabilities=frozenset()),
            PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p0", plain_healthy, 0),))]


@pytest.mark.parametrize("doc,plain_healthy,hint,expected", [
    ({}, True, "auto", ("spec", Reason.SPECULATIVE)),
    ({"seed": 7}, True, "auto", ("plain", Reason.SAMPLING_GUARANTEE)),
    ({"seed": 0}, True, "auto", ("plain", Reason.SAMPLING_GUARANTEE)),
    ({"logit_bias": {"5": -100}}, True, "auto", ("plain", Reason.SAMPLING_GUARANTEE)),
    ({"seed": None, "logit_bias": {}}, True, "auto", ("spec", Reason.SPECULATIVE)),   # unset: no trigger
    ({"seed": 7}, False, "auto", ("spec", Reason.PLAIN_UNHEALTHY)),   # a fallback, never a refusal
    ({"seed": 7}, True, "on", ("spec", Reason.SPECULATIVE)),          # the client insists
    ({"seed": 7, "min_p": 0.1}, True, "auto", ("plain", Reason.SAMPLING_CONTROLS)),  # a need outranks it
])
def test_seed_and_logit_bias_prefer_a_pool_that_honours_them(doc, plain_healthy, hint, expected):
    d = _decide_doc(doc, _pools(plain_healthy), hint)
    assert (d.pool, d.reason) == expected
    assert capabilities.trigger_param(_parsed(doc), "sampling_guarantee") is None   # a preference, never a 400 cause
    assert not Reason.SAMPLING_GUARANTEE.capability
    assert "sampling_guarantee" not in capabilities.KINDS
