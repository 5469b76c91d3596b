"""Which changed settings a config reload cannot apply (router.app.reload.start_only_changes)."""

from __future__ import annotations

from router.app.reload import START_ONLY, start_only_changes
from router.config.tree import parse_config
from tests.support.config_docs import BASE, with_


def test_nothing_pending_for_the_same_file_or_for_settings_a_reload_applies():
    started = parse_config(BASE)
    assert start_only_changes(started, parse_config(BASE)) == []
    for path, value in [("routing.long_prompt_tokens", 5), ("upstream", {"idle_timeout_s": 30.0}),
                        ("server", {"reload_interval_s": 2.0}), ("auth", {"api_keys_file": "/keys"})]:
        assert start_only_changes(started, parse_config(with_(path, value))) == [], path


def test_each_start_only_setting_is_named_in_order_and_no_value_is():
    started = parse_config(BASE)
    loaded = parse_config(with_("upstream", {"client": "aiohttp", "keepalive_timeout_s": 3.0}))
    assert start_only_changes(started, loaded) == ["upstream.client", "upstream.keepalive_timeout_s"]
    doc = with_("server", {"host": "10.0.0.5", "port": 9000})
    doc["auth"] = {"engine_api_key": "sk-engine-1234567890"}
    assert start_only_changes(started, parse_config(doc)) == [
        "server.host", "server.port", "auth.engine_api_key"]
    # A rotated inline key is a change (compared by value, named only by its path).
    rotated = {**doc, "auth": {"engine_api_key": "sk-engine-0987654321"}}
    assert start_only_changes(parse_config(doc), parse_config(rotated)) == ["auth.engine_api_key"]
    assert start_only_changes(started, parse_config(with_("upstream", {"max_connections": 8}))) == [
        "upstream.max_connections"]
    assert start_only_changes(started, parse_config(with_("auth", {"engine_api_key_env": "ENGINE_KEY"}))) == [
        "auth.engine_api_key_env"]
    assert len(START_ONLY) == len(set(START_ONLY)) == 9
