"""Config reload under a live router: what runs where, what survives a failure, and that
reading ``/metrics`` changes nothing."""

from __future__ import annotations

import logging
import shutil
import threading

import httpx
import yaml

from router.state.runtime import Endpoint
from tests.support import RouterServer, router_config, write_router_yaml

CHAT = "/v1/chat/completions"


def test_reload_writes_live_endpoints_only_on_the_event_loop(stack, monkeypatch):
    writes: list[tuple[int, str]] = []
    real = Endpoint.__setattr__

    def recording(self, name, value):
        writes.append((threading.get_ident(), name))
        real(self, name, value)

    state = stack.router.state
    old = state.runtime.endpoint(stack.spec.base_url)
    monkeypatch.setattr(Endpoint, "__setattr__", recording)
    doc = yaml.safe_load(stack.config_path.read_text())
    doc["health"]["failure_threshold"] = 5
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(1)
    monkeypatch.undo()
    assert (state.reloads_ok, state.reloads_failed) == (1, 0)
    assert state.runtime.endpoint(stack.spec.base_url) is old
    assert old.failure_threshold == 5
    assert {"failure_threshold", "ledger"} <= {name for _, name in writes}
    assert {ident for ident, _ in writes} == {stack.router.thread.ident}   # the router's loop thread


def test_reload_survives_a_corrupt_tokenizer_and_applies_the_next_change(stack, tokenizer_dir, tmp_path, caplog):
    state = stack.router.state
    counter = state.runtime.counter
    bad = tmp_path / "bad-tokenizer"
    shutil.copytree(tokenizer_dir, bad)
    (bad / "tokenizer.json").write_text('{"version": "1.0", "model": ')   # cut short
    doc = yaml.safe_load(stack.config_path.read_text())
    good_tokenizer = doc["model"]["tokenizer"]
    doc["model"]["tokenizer"] = str(bad)
    caplog.set_level(logging.ERROR, logger="specgate.reload")
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(1)
    assert (state.reloads_ok, state.reloads_failed) == (0, 1)
    assert stack.router.metric("specgate_config_reloads_total", result="failure") == 1
    assert stack.router.metric("specgate_config_reloads_total", result="success") == 0
    assert state.runtime.counter is counter
    assert state.runtime.config.model.tokenizer == good_tokenizer
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "config reload failed, keeping the last good config"]
    # the watcher lives on: the next valid change is applied
    doc["model"]["tokenizer"] = good_tokenizer
    doc["routing"]["long_prompt_tokens"] = 5
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(2)
    assert (state.reloads_ok, state.reloads_failed) == (1, 1)
    assert stack.router.metric("specgate_config_reloads_total", result="success") == 1
    r = stack.client.post(CHAT, json={"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}],
                                      "max_tokens": 2})
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "long_context")


def test_reading_metrics_does_not_advance_the_bypass_hysteresis(tmp_path, tokenizer_dir):
    # no scrape loop: nothing but the requests below may touch the pools
    path = write_router_yaml(tmp_path / "router.yaml",
                             router_config(tokenizer_dir, "http://127.0.0.1:9", "http://127.0.0.1:10"))
    router = RouterServer(path, scrape=False).start()
    try:
        spec = next(p for p in router.state.runtime.pools if p.name == "spec")
        leases = [ep.lease() for ep in spec.endpoints.values() for _ in range(8)]   # load 8 >= enter 8
        for _ in range(3):
            r = httpx.get(router.base_url + "/metrics")
            assert r.status_code == 200
            assert 'specgate_bypass_active{kind="saturated",pool="spec"} 0.0' in r.text
            assert 'specgate_inflight_requests{pool="spec"} 8.0' in r.text
        assert (spec.saturated, spec.low_acceptance) == (False, False)
        assert router.state.scrape_rounds == 0
        router.state.on_scrape_round(router.state.runtime)   # a round is what advances it
        assert (spec.saturated, router.metric("specgate_bypass_active", pool="spec", kind="saturated")) == (True, 1)
        for lease in leases:
            lease.release()
    finally:
        router.stop()


def test_a_reload_names_the_settings_it_cannot_apply_until_they_are_back(stack, caplog):
    state = stack.router.state
    transport = state.transport
    doc = yaml.safe_load(stack.config_path.read_text())
    started = dict(doc.get("upstream", {}))
    caplog.set_level(logging.WARNING, logger="specgate.reload")
    doc["upstream"] = {**started, "keepalive_timeout_s": 3.0, "max_connections": 64, "client": "aiohttp"}
    doc.setdefault("auth", {})["engine_api_key"] = "sk-engine-rotated-4242"
    doc["routing"]["long_prompt_tokens"] = 5
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(1)
    assert (state.reloads_ok, state.reloads_failed) == (1, 0)
    assert state.runtime.routing.long_prompt_tokens == 5   # the rest of the file applies
    assert state.transport is transport                    # the client the router started with
    assert [r.getMessage() for r in caplog.records] == [
        ("config reload: upstream.client, upstream.max_connections, upstream.keepalive_timeout_s, "
         "auth.engine_api_key differ from the config the router started with and apply only at start; "
         "restart the router to apply them")]
    assert stack.router.metric("specgate_config_restart_pending") == 1
    # Back to the values it started with: nothing pending.
    doc["upstream"] = started
    del doc["auth"]["engine_api_key"]
    doc["routing"]["long_prompt_tokens"] = 6
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(2)
    assert state.reloads_ok == 2 and state.runtime.routing.long_prompt_tokens == 6
    assert stack.router.metric("specgate_config_restart_pending") == 0
    assert len(caplog.records) == 1
