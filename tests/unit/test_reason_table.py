"""Every copy of the reason and capability names matches the one table (router.reasons).

The table is :class:`router.reasons.Reason`; the copies a reader meets elsewhere are the Helm
schema's enum of ``pools[].capabilities``, the README's decision table, the operator guide's
table of kinds, and the config check. Changing one copy by hand fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from router import capabilities
from router.config import ConfigError, parse_config
from router.reasons import CAPABILITY_KINDS, Reason, capability_kind

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
    assert capabilities.KINDS == ("constrained_decoding", "tool_calls", "reasoning", "logprobs", "sampling_controls")
    assert all(Reason(k).capability for k in capabilities.KINDS)


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
    # a row "the feature's kind" stands for every capability kind, named in its first cell
    named |= set().union(*(_names(r[0]) for r in rows)) & set(capabilities.KINDS)
    assert named == {r.value for r in Reason}


def test_operator_guide_kind_table_matches_the_table():
    rows = _table_rows((ROOT / "docs/operator-guide.md").read_text(), "| kind (decision reason)")
    assert tuple(next(iter(_names(r[0]))) for r in rows) == capabilities.KINDS


def test_config_accepts_exactly_the_capability_kinds():
    for kind in capabilities.KINDS:
        assert capability_kind(kind) is Reason(kind)
    for bad in ("speculative", "multimodal", "Logprobs"):
        with pytest.raises(ValueError, match="unknown kind"):
            capability_kind(bad)
    with pytest.raises(ConfigError, match="unknown kind 'multimodal'"):
        _config(["multimodal"])
    cfg = _config(list(capabilities.KINDS))
    assert cfg.pools[0].served_capabilities == frozenset(capabilities.KINDS)


def _config(kinds: list[str]):
    return parse_config({
        "model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
        "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"], "capabilities": kinds},
                  {"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:2"]}]})
