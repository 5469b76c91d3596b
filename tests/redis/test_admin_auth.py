"""Runtime overrides through the admin API, applied by every replica; admin and client keys."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import yaml

from tests.redis.cluster import CHAT, Cluster
from tests.support import wait_until

ADMIN = "adm-7f3c9a1e5b2d4f60"
CLIENT_KEYS = ["ck-alpha-0123456789", "ck-beta-9876543210"]
WRONG = "sk-wrong-5550001"
YAML_THRESHOLDS = {"routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 3, "exit": 1}}}


def secured_cluster(tmp_path, tokenizer_dir, redis_server, replicas: int = 2) -> Cluster:
    keyfile = tmp_path / "api-keys"   # as a Kubernetes Secret volume would hold it
    keyfile.write_text("# client keys\n" + "\n".join(CLIENT_KEYS) + "\n\n")
    return Cluster(tmp_path, tokenizer_dir, redis_server, replicas=replicas,
                   headers={"authorization": f"Bearer {CLIENT_KEYS[0]}"},
                   **{"routing.saturation": {"enter": 3, "exit": 1},
                      "auth": {"api_keys_file": str(keyfile), "admin_api_key": ADMIN},
                      "server.log_requests": True})


@pytest.fixture
def secured(tmp_path, tokenizer_dir, redis_server) -> Iterator[Cluster]:
    c = secured_cluster(tmp_path, tokenizer_dir, redis_server)
    try:
        yield c
    finally:
        c.close()


def admin(c: Cluster, i: int, method: str, token: str | None = ADMIN, **kw) -> httpx.Response:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    return httpx.request(method, c.routers[i].base_url + "/admin/config", headers=headers, timeout=10, **kw)


def error(r: httpx.Response, status: int, code: str, type_: str = "invalid_request_error") -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"], err["param"]) == (type_, code, None)
    return err["message"]


def route(c: Cluster, i: int, quiet: bool = True) -> tuple[int, str, str]:
    """One short chat request through replica ``i``; with ``quiet``, once no earlier request
    counts as load on any replica (needs Redis up)."""
    if quiet:
        c.wait_quiet()
    r = c.clients[i].post(CHAT, json={"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}],
                                      "max_tokens": 2})
    return r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]


def test_admin_endpoint_needs_the_admin_key(secured: Cluster):
    error(admin(secured, 0, "GET", token=None), 401, "invalid_api_key")
    error(admin(secured, 0, "GET", token=WRONG), 401, "invalid_api_key")
    r = httpx.get(secured.routers[0].base_url + "/admin/config", headers={"authorization": f"Basic {ADMIN}"})
    error(r, 401, "invalid_api_key")
    error(admin(secured, 0, "GET", token=CLIENT_KEYS[1]), 403, "permission_denied")
    error(admin(secured, 1, "PUT", token=CLIENT_KEYS[0], json={"routing": {"long_prompt_tokens": 5}}),
          403, "permission_denied")
    error(admin(secured, 1, "DELETE", token=None), 401, "invalid_api_key")
    r = admin(secured, 0, "GET")
    assert r.status_code == 200
    doc = r.json()
    assert doc["yaml"] == doc["effective"] == YAML_THRESHOLDS
    assert doc["overrides"] == {"routing": {}}
    assert doc["override_error"] is None
    assert doc["shared_state"]["status"] == "ok"
    assert secured.redis.client().get("{t}:overrides") is None


def test_override_set_on_one_replica_applies_on_the_other(secured: Cluster):
    a, b = secured.routers
    r = admin(secured, 0, "PUT", json={"routing": {"long_prompt_tokens": 5, "saturation": {"enter": 2}}})
    assert r.status_code == 200, r.text
    want = {"routing": {"long_prompt_tokens": 5, "saturation": {"enter": 2, "exit": 1}}}
    assert r.json()["effective"] == want
    assert r.json()["overrides"] == {"routing": {"long_prompt_tokens": 5, "saturation": {"enter": 2}}}
    assert json.loads(secured.redis.client().get("{t}:overrides")) == r.json()["overrides"]
    assert wait_until(lambda: b.state.runtime.routing.long_prompt_tokens == 5, timeout=5)
    doc = admin(secured, 1, "GET").json()
    assert (doc["yaml"], doc["effective"]) == (YAML_THRESHOLDS, want)
    assert route(secured, 1) == (200, "plain", "long_context")
    assert route(secured, 0) == (200, "plain", "long_context")
    for router in (a, b):
        router.state.refresh_gauges()
        assert router.metric("specgate_routing_threshold", key="long_prompt_tokens") == 5
        assert router.metric("specgate_routing_override_active", key="long_prompt_tokens") == 1
        assert router.metric("specgate_routing_threshold", key="saturation_enter") == 2
        assert router.metric("specgate_routing_override_active", key="saturation_enter") == 1
        assert router.metric("specgate_routing_threshold", key="saturation_exit") == 1
        assert router.metric("specgate_routing_override_active", key="saturation_exit") == 0
    # Validated like the YAML; a refused change changes nothing.
    msg = error(admin(secured, 1, "PUT", json={"routing": {"saturation": {"exit": 5}}}), 400, "invalid_value")
    assert "routing.saturation" in msg and "must be < saturation.enter" in msg
    msg = error(admin(secured, 1, "PUT", json={"routing": {"long_prompt_tokens": "5"}}), 400, "invalid_value")
    assert "routing.long_prompt_tokens" in msg
    msg = error(admin(secured, 1, "PUT", json={"routing": {"seed": 3}}), 400, "invalid_value")
    assert "routing.seed" in msg
    error(admin(secured, 1, "PUT", content=b"{nope"),
          400, "invalid_json")
    secured.wait_syncs(4)   # the other replica would have picked a stored change up by now
    for router in (a, b):
        assert router.state.runtime.routing.long_prompt_tokens == 5
    # Cleared on the other replica: both back to the YAML values.
    r = admin(secured, 1, "DELETE")
    assert r.status_code == 200 and r.json()["effective"] == YAML_THRESHOLDS
    assert wait_until(lambda: a.state.runtime.routing.long_prompt_tokens == 1024, timeout=5)
    assert admin(secured, 0, "GET").json()["overrides"] == {"routing": {}}
    assert secured.redis.client().get("{t}:overrides") is None
    assert route(secured, 0) == (200, "spec", "speculative")


def test_override_refused_while_redis_is_down(secured: Cluster, redis_server):
    redis_server.pause()
    try:
        started = time.perf_counter()
        r = admin(secured, 0, "PUT", json={"routing": {"long_prompt_tokens": 5}})
        assert time.perf_counter() - started < 2.0
        error(r, 503, "shared_state_unavailable", type_="server_error")
        assert secured.routers[0].state.runtime.routing.long_prompt_tokens == 1024
        assert admin(secured, 0, "GET").json()["effective"] == YAML_THRESHOLDS
        assert route(secured, 0, quiet=False) == (200, "spec", "speculative")
    finally:
        redis_server.resume()


def test_overrides_with_the_memory_backend_survive_a_reload(tmp_path, tokenizer_dir):
    c = secured_cluster(tmp_path, tokenizer_dir, None, replicas=1)
    try:
        r = admin(c, 0, "PUT", json={"routing": {"long_prompt_tokens": 5}})
        assert r.status_code == 200 and r.json()["shared_state"] == {"backend": "memory", "status": "ok"}
        doc = yaml.safe_load(c.config_path.read_text())
        doc["routing"]["long_prompt_tokens"] = 2000
        c.config_path.write_text(yaml.safe_dump(doc))
        assert wait_until(lambda: c.routers[0].state.runtime.config.routing.long_prompt_tokens == 2000, timeout=5)
        got = admin(c, 0, "GET").json()
        assert (got["yaml"]["routing"]["long_prompt_tokens"], got["effective"]["routing"]["long_prompt_tokens"]) == (2000, 5)
        assert route(c, 0) == (200, "plain", "long_context")
        assert admin(c, 0, "DELETE").json()["effective"]["routing"]["long_prompt_tokens"] == 2000
        assert route(c, 0) == (200, "spec", "speculative")
    finally:
        c.close()


def test_client_api_keys_401_and_never_logged(tmp_path, tokenizer_dir, redis_server, caplog):
    caplog.set_level(logging.INFO)
    c = secured_cluster(tmp_path, tokenizer_dir, redis_server, replicas=1)
    try:
        base = c.routers[0].base_url
        body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        r = httpx.post(base + CHAT, json=body)
        error(r, 401, "invalid_api_key")
        assert r.headers["x-should-retry"] == "false"
        assert r.headers["x-specgate-reason"] == "unauthorized"
        r = httpx.post(base + CHAT, json=body, headers={"authorization": f"Bearer {WRONG}"})
        assert WRONG not in error(r, 401, "invalid_api_key")
        error(httpx.post(base + CHAT, json=body, headers={"authorization": WRONG}), 401, "invalid_api_key")
        error(httpx.get(base + "/v1/models"), 401, "invalid_api_key")
        error(httpx.get(base + "/v1/models/tiny-llama"), 401, "invalid_api_key")  # models.retrieve too
        for key in CLIENT_KEYS:
            r = httpx.post(base + CHAT, json=body, headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200 and r.headers["x-specgate-pool"] == "spec"
        assert httpx.get(base + "/v1/models", headers={"authorization": f"Bearer {CLIENT_KEYS[1]}"}).status_code == 200
        assert httpx.get(base + "/v1/models/tiny-llama",
                         headers={"authorization": f"Bearer {CLIENT_KEYS[1]}"}).json()["id"] == "tiny-llama"
        # The official client: a wrong key is an AuthenticationError, a right one works.
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(api_key=WRONG, base_url=base + "/v1", max_retries=0).chat.completions.create(**body)
        ok = openai.OpenAI(api_key=CLIENT_KEYS[0], base_url=base + "/v1").chat.completions.create(**body)
        assert ok.choices[0].message.content == "tok0 tok1"
        # Probes and metrics stay open.
        for path in ("/health", "/ready", "/metrics"):
            assert httpx.get(base + path).status_code == 200
        router = c.routers[0]
        assert router.metric("specgate_requests_total", pool="none", reason="unauthorized", status="401") == 4
        assert router.settled_metric("specgate_requests_total", 3, pool="spec", reason="speculative", status="200") == 3
        metrics_text = httpx.get(base + "/metrics").text
        access = [rec.getMessage() for rec in caplog.records if rec.name == "specgate.access"]
        assert len(access) == 7   # 4 refused + 3 served chat requests, one line each
        assert sum('"status":401' in line for line in access) == 4
        everything = "\n".join(rec.getMessage() for rec in caplog.records) + metrics_text
        for key in [*CLIENT_KEYS, WRONG, ADMIN]:
            assert key not in everything
    finally:
        c.close()
