"""The chart's ``auth.engine_fields`` (who may send SGLang's engine-internal request fields):
rendered into the router's config as written, refused by the schema for a name outside the
router's table, absent by default."""

from __future__ import annotations

import hashlib
import re

import pytest

from router.config.server import ENGINE_FIELDS
from router.config.tree import parse_config

from . import k8s


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_not_rendered_by_default() -> None:
    assert "engine_fields" not in k8s.router_config(k8s.render()).get("auth", {})


def test_rendered_as_written_and_read_by_the_router() -> None:
    block = {"allow": ["routed_dp_rank"], "keys": {_digest("client-a"): ["custom_logit_processor", "custom_params"]}}
    cfg = k8s.router_config(k8s.render({"auth": {"engine_fields": block}}))
    assert cfg["auth"]["engine_fields"] == block
    parsed = parse_config(cfg)
    assert parsed.auth.engine_fields.allow == ("routed_dp_rank",)
    assert parsed.auth.engine_fields.keys == {_digest("client-a"): ("custom_logit_processor", "custom_params")}


@pytest.mark.parametrize(("block", "message"), [
    ({"allow": ["input_ids"]}, "at '/auth/engine_fields/allow/0'"),
    ({"keys": {"sk-live": ["routed_dp_rank"]}}, "invalid propertyName 'sk-live'"),
    ({"allow": ["routed_dp_rank"], "deny": []}, "at '/auth/engine_fields'"),
])
def test_the_schema_refuses_what_the_router_would(block, message) -> None:
    with pytest.raises(Exception, match=re.escape(message)):
        k8s.validate_schema({"auth": {"engine_fields": block}})


def test_every_field_of_the_table_is_accepted() -> None:
    k8s.validate_schema({"auth": {"engine_fields": {"allow": sorted(ENGINE_FIELDS)}}})
