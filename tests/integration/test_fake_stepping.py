"""The fake's step-engine seam (serving/fake_sglang/stepping.py) with a tiny engine: fixed step
time, KV admission by reservation, exact tokens per step, the gauges and spec details it reports."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from serving.fake_sglang.errors import ClientError
from serving.fake_sglang.stepping import StepEmit, StepGauges, StepRequest, parse_hint
from tests.support.wait import wait_until


class TinyEngine:
    """A fixed ``dt`` per step; every running sequence emits ``per_step`` tokens (capped by what it
    has left) and counts ``per_step`` toward its verify steps (a speculative engine when > 1);
    admission FIFO while ``P + max_new_tokens`` fits ``capacity``."""

    def __init__(self, capacity: int, dt: float, per_step: int = 1) -> None:
        self.capacity, self.dt, self.per_step = capacity, dt, per_step
        self.speculative = per_step > 1
        self.waiting: list[StepRequest] = []
        self.running: dict[int, list[Any]] = {}  # id(key) -> [req, generated, spec_tokens, verify_ct]
        self.reserved = 0
        self.accept: float | None = None
        self.submitted: list[StepRequest] = []

    def fits(self, req: StepRequest) -> bool:
        return req.prompt_tokens + req.max_new_tokens <= self.capacity

    def submit(self, req: StepRequest) -> None:
        self.submitted.append(req)
        self.waiting.append(req)

    def abort(self, key: object) -> None:
        self.waiting = [r for r in self.waiting if r.key is not key]
        st = self.running.pop(id(key), None)
        if st is not None:
            self.reserved -= st[0].prompt_tokens + st[0].max_new_tokens

    def start_step(self, now: float) -> float | None:
        while self.waiting and self.reserved + self.waiting[0].prompt_tokens + self.waiting[0].max_new_tokens \
                <= self.capacity:
            r = self.waiting.pop(0)
            self.reserved += r.prompt_tokens + r.max_new_tokens
            self.running[id(r.key)] = [r, 0, 0, 0]
        return self.dt if self.running else None

    def finish_step(self, now: float) -> list[StepEmit]:
        out = []
        for k, st in list(self.running.items()):
            req = st[0]
            n = min(self.per_step, req.output_tokens - st[1])
            st[1] += n
            if self.speculative:
                st[2], st[3] = st[2] + self.per_step, st[3] + 1
            done = st[1] >= req.output_tokens
            out.append(StepEmit(req.key, n, done, st[2], st[3]))
            if done:
                del self.running[k]
                self.reserved -= req.prompt_tokens + req.max_new_tokens
        if self.speculative and out:
            self.accept = float(self.per_step)
        return out

    def gauges(self) -> StepGauges:
        return StepGauges(len(self.running), len(self.waiting), self.reserved, self.capacity, self.accept)


def _metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("sglang:") and "{" in line:
            name = line.split("{")[0][len("sglang:"):]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _chat(words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": " ".join(["x"] * words)}],
            "max_tokens": max_tokens, "temperature": 0, **extra}


def test_kv_admission_queues_until_a_reservation_fits_and_tokens_are_exact() -> None:
    # prompt 40 words -> P = 42 (the simple count: 1 + words + 1); A reserves 42 + 50 = 92 of 100,
    # B (P 22, 30 tokens: 52) waits until A has finished
    eng = TinyEngine(capacity=100, dt=0.05)  # A runs 1 s: B arrives while it does
    with FakeServer(FakeConfig(model_name="m", max_total_num_tokens=100, context_length=100),
                    step_engine=eng) as srv:
        answers: dict[str, httpx.Response] = {}

        def send(name: str, body: dict[str, Any]) -> None:
            answers[name] = httpx.post(srv.base_url + "/v1/chat/completions", json=body, timeout=30)

        a = threading.Thread(target=send, args=("a", _chat(40, 50, fake_step={"output_tokens": 20})))
        a.start()
        wait_until(lambda: _metrics(srv.base_url)["num_running_reqs"] == 1, 10, "A running")
        b = threading.Thread(target=send, args=("b", _chat(20, 30)))
        b.start()
        def queued() -> dict[str, float] | None:
            m = _metrics(srv.base_url)
            return m if m["num_queue_reqs"] == 1 else None

        m = wait_until(queued, 10, "B queued behind A's reservation")
        assert m["num_running_reqs"] == 1
        assert m["token_usage"] == pytest.approx(0.92)
        assert m["max_total_num_tokens"] == 100
        a.join(30)
        b.join(30)
        ra, rb = answers["a"].json(), answers["b"].json()
        # A stops at its natural length (the hint) with "stop"; B runs to its budget: "length"
        assert ra["usage"]["completion_tokens"] == 20
        assert ra["usage"]["prompt_tokens"] == 42
        assert ra["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert ra["choices"][0]["finish_reason"] == "stop"
        assert ra["choices"][0]["message"]["content"] == " ".join(f"tok{i}" for i in range(20))
        assert rb["usage"]["completion_tokens"] == 30
        assert rb["choices"][0]["finish_reason"] == "length"
        assert "sglext" not in ra
        m = _metrics(srv.base_url)
        assert (m["num_running_reqs"], m["num_queue_reqs"], m["token_usage"]) == (0, 0, 0)
        assert m["generation_tokens_total"] == 50
        assert m["spec_accept_length"] == 0
        assert eng.submitted[0].max_new_tokens == 50 and eng.submitted[0].output_tokens == 20
        assert eng.submitted[1].output_tokens == 30


def test_speculative_steps_report_the_sequences_own_accept_length() -> None:
    eng = TinyEngine(capacity=1000, dt=0.01, per_step=3)
    with FakeServer(FakeConfig(model_name="m", max_total_num_tokens=1000, speculative_algorithm="EAGLE3"),
                    step_engine=eng) as srv:
        body = _chat(10, 64, fake_step={"output_tokens": 10, "cached_tokens": 4, "alpha_scale": 0.5},
                     return_spec_tokens_details=True, stream=True, stream_options={"include_usage": True})
        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json=body, timeout=30) as r:
            events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
        docs = [json.loads(e) for e in events if e != "[DONE]"]
        contents = [d["choices"][0]["delta"].get("content") for d in docs if d.get("choices")]
        # one content chunk per step: 3 + 3 + 3 + 1 tokens
        assert [c for c in contents if c] == ["tok0 tok1 tok2", " tok3 tok4 tok5", " tok6 tok7 tok8", " tok9"]
        details = next(d["sglext"]["spec_tokens_details"] for d in docs if "sglext" in d)
        assert details["spec_verify_ct"] == 4
        assert details["spec_accept_length"] == 3.0
        usage = next(d["usage"] for d in docs if d.get("usage"))
        assert usage["completion_tokens"] == 10
        assert usage["prompt_tokens_details"]["cached_tokens"] == 4
        assert eng.submitted[0].alpha_scale == 0.5 and eng.submitted[0].temperature == 0.0
        assert _metrics(srv.base_url)["spec_accept_length"] == 3.0


def test_a_bad_hint_is_a_400() -> None:
    with FakeServer(FakeConfig(model_name="m"), step_engine=TinyEngine(1000, 0.01)) as srv:
        r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat(3, 8, fake_step={"output_tokens": 0}))
        assert r.status_code == 400
        assert "fake_step.output_tokens" in r.text


@pytest.mark.parametrize("value", [[], {"what": 1}, {"cached_tokens": -1}, {"alpha_scale": True}])
def test_parse_hint_refuses(value: Any) -> None:
    with pytest.raises(ClientError):
        parse_hint(value)
