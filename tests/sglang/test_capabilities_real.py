"""The real SGLang 0.5.23 CPU pools (EAGLE-3 and plain, one pair for the module): the live
lossless canary matches, and which request features the speculative engine serves as the plain
one does (greedy, token for token). The feature matrix is written to
``$SPECGATE_FEATURE_REPORT`` (JSON) when that variable is set; docs/operator-guide.md records
the result for the pinned version."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml

from router.loops.canary import answer_key
from tests.support import RouterServer

pytestmark = pytest.mark.sglang

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["name", "population"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
FEATURES = {
    "plain": {},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}},
    "regex": {"regex": "(yes|no)( indeed)?"},
    "ebnf": {"ebnf": 'root ::= "yes" | "no"'},
    "logprobs": {"logprobs": True, "top_logprobs": 3},
    "tools_auto": {"tools": TOOLS, "tool_choice": "auto"},
    "tools_required": {"tools": TOOLS, "tool_choice": "required"},
}
MESSAGES = [{"role": "user", "content": "Give the largest city of France as JSON."}]


@pytest.fixture(scope="module")
def pair(cpu_server, eagle3_draft_dir):
    spec = cpu_server(["--served-model-name", "tiny-llama",
                       "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(eagle3_draft_dir),
                       "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "4"])
    plain = cpu_server(["--served-model-name", "tiny-llama"])
    return spec, plain


def _ask(base_url: str, extra: dict) -> tuple[str, object]:
    body = {"model": "tiny-llama", "messages": MESSAGES, "temperature": 0, "max_tokens": 24, **extra}
    try:
        r = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120)
    except httpx.HTTPError as exc:
        return "transport_error", repr(exc)
    if r.status_code != 200:
        return f"http_{r.status_code}", r.text[:200]
    doc = r.json()
    logprobs = (doc["choices"][0].get("logprobs") or {}).get("content")
    rounded = [(t["token"], round(t["logprob"], 4)) for t in logprobs] if logprobs else None
    return "ok", (answer_key(doc), rounded)


def test_feature_matrix_spec_versus_plain(pair):
    spec, plain = pair
    report = {}
    for name, extra in FEATURES.items():
        s_status, s_out = _ask(spec.base_url, extra)
        p_status, p_out = _ask(plain.base_url, extra)
        alive = httpx.get(spec.base_url + "/health", timeout=30).status_code == 200
        same = s_status == p_status == "ok" and s_out == p_out
        report[name] = {"spec": s_status, "plain": p_status, "identical": same, "spec_alive_after": alive,
                        "spec_out": str(s_out)[:300], "plain_out": str(p_out)[:300]}
    out = os.environ.get("SPECGATE_FEATURE_REPORT")
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    assert report["plain"]["identical"], report["plain"]          # losslessness of plain sampling
    assert all(r["spec_alive_after"] for r in report.values()), report


def test_canary_matches_on_the_real_pools(pair, tiny_model_dir, tmp_path):
    spec, plain = pair
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"name": "tiny-llama", "tokenizer": str(tiny_model_dir)},
        "limits": {"max_context_tokens": 2048, "default_max_tokens": 16},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [spec.base_url], "draft_reserved_tokens": 4},
                  {"name": "plain", "speculative": False, "endpoints": [plain.base_url]}],
        "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6}},
        "scrape": {"interval_s": 0.25, "timeout_s": 5.0, "stale_after_s": 5.0},
        "server": {"log_requests": False},
        "canary": {"enabled": True, "interval_s": 3600, "check_s": 0.1, "max_tokens": 32, "timeout_s": 120,
                   "on_mismatch": "eject"},
    }))
    router = RouterServer(cfg).start()
    try:
        deadline = time.monotonic() + 240
        def done() -> float:
            return sum(router.metric("specgate_canary_rounds_total", pool="spec", result=r)
                       for r in ("match", "mismatch", "error"))
        while done() < 1:
            assert time.monotonic() < deadline, "no canary round finished"
            time.sleep(0.2)
        assert router.metric("specgate_canary_rounds_total", pool="spec", result="match") == 1
        assert router.metric("specgate_canary_mismatch", pool="spec") == 0
    finally:
        router.stop()
