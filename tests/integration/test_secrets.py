"""No secret leaves the router: client keys, the engines' key, the Redis password and the
admin key never appear in logs (DEBUG), response bodies or headers, ``/metrics``, ``/ready``,
and the engine never sees the client's credentials, only ``Authorization: Bearer <engine key>``."""

from __future__ import annotations

import logging

from tests.support import free_port, wait_until
from tests.support.stack import Stack

K1 = "sk-client-K1CANARY"
E = "eng-E-CANARY"
R = "redis-R-CANARY"
A = "adm-A-CANARY"
WRONG = "sk-WRONG-CANARY123"
BARE = "CANARY456"
COOKIE = "session=CANARY-COOKIE"
XKEY = "CANARY-XKEY"
CANARIES = (K1, E, R, A, "CANARY123", BARE, "CANARY-COOKIE", XKEY)


def chat(**extra):
    return {"model": "tiny-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_no_secret_in_anything_the_router_emits(tmp_path, tokenizer_dir, caplog, capfd) -> None:
    caplog.set_level(logging.DEBUG)
    stack = Stack(tmp_path, tokenizer_dir, **{
        "auth": {"api_keys": [K1], "admin_api_key": A, "engine_api_key": E},
        # a Redis that is not there (wrong password or not, the router goes degraded)
        "state": {"backend": "redis", "redis_url": f"redis://:{R}@127.0.0.1:{free_port()}/0"},
        "server.log_requests": True})
    seen: list[str] = []
    try:
        c = stack.client
        client_creds = {"authorization": f"Bearer {K1}", "cookie": COOKIE, "x-api-key": XKEY}
        answers = [
            c.post("/v1/chat/completions", json=chat(), headers=client_creds),
            c.post("/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {WRONG}"}),
            c.post("/v1/chat/completions", json=chat(), headers={"authorization": BARE}),
            c.post("/v1/chat/completions", json=chat(max_tokens="x"), headers=client_creds),
            c.get("/admin/config", headers={"authorization": f"Bearer {K1}"}),
            c.get("/admin/config", headers={"authorization": f"Bearer {WRONG}"}),
        ]
        stack.script(stack.spec, {"fault": "reset", "after_chunks": 3})
        stack.script(stack.plain, {"fault": "reset", "after_chunks": 3})
        answers.append(c.post("/v1/chat/completions", json=chat(stream=True, max_tokens=20), headers=client_creds))
        assert [a.status_code for a in answers] == [200, 401, 401, 400, 403, 401, 200]
        assert b'"upstream_error"' in answers[-1].content
        invalid = {"error": {"message": "Invalid API key", "type": "invalid_request_error",
                             "param": None, "code": "invalid_api_key"}}
        assert answers[1].json() == invalid  # a wrong key
        assert answers[2].json() == invalid  # a key without the Bearer scheme
        # a config reload
        text = stack.config_path.read_text().replace("long_prompt_tokens: 1024", "long_prompt_tokens: 1000")
        stack.config_path.write_text(text)
        wait_until(lambda: stack.router.metric("specgate_config_reloads_total", result="success") >= 1, 10,
                   "a config reload")
        for path in ("/metrics", "/ready", "/health", "/v1/models"):
            answers.append(c.get(path, headers=client_creds))
        for a in answers:
            seen.append(a.text)
            seen.append(repr(dict(a.headers)))
        # what the engines received
        received = [r for fake in (stack.spec, stack.plain) for r in stack.fake_log(fake)["requests"]]
        gen = [r for r in received if r["path"] == "/v1/chat/completions"]
        assert gen, "no generation reached an engine"
        for r in received:
            headers = r["headers"]
            assert "cookie" not in headers and "x-api-key" not in headers, r["path"]
            if r["path"] in ("/v1/chat/completions", "/abort_request", "/metrics"):
                assert headers.get("authorization") == f"Bearer {E}", r["path"]
    finally:
        stack.close()
    out = capfd.readouterr()
    seen += [caplog.text, out.out, out.err]
    everything = "\n".join(seen)
    assert "specgate.access" in caplog.text  # the access log was on and collected
    for canary in CANARIES:
        assert canary not in everything, canary


def test_no_authorization_upstream_without_an_engine_key(tmp_path, tokenizer_dir) -> None:
    stack = Stack(tmp_path, tokenizer_dir, auth={"api_keys": [K1]})
    try:
        r = stack.client.post("/v1/chat/completions", json=chat(),
                              headers={"authorization": f"Bearer {K1}", "cookie": COOKIE, "x-api-key": XKEY})
        assert r.status_code == 200
        received = [q for fake in (stack.spec, stack.plain) for q in stack.fake_log(fake)["requests"]]
        assert any(q["path"] == "/v1/chat/completions" for q in received)
        for q in received:
            assert not {"authorization", "cookie", "x-api-key"} & set(q["headers"]), q
    finally:
        stack.close()


def test_engine_key_from_a_file(tmp_path, tokenizer_dir) -> None:
    key = tmp_path / "engine-key"
    key.write_text(f"# SGLang --api-key\n{E}\n")
    stack = Stack(tmp_path, tokenizer_dir, auth={"engine_api_key_file": str(key)})
    try:
        assert stack.client.post("/v1/chat/completions", json=chat()).status_code == 200
        gen = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
        assert [q["headers"]["authorization"] for q in gen] == [f"Bearer {E}"]
    finally:
        stack.close()
