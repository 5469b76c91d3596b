"""The main job, end to end on this machine: ``specgate demo --config examples/demo.yaml``.

1. Rewrites the config's endpoints to free ports of 127.0.0.1 (a copy in a temp dir).
2. Starts every pool's **real SGLang server** with ``specgate serve`` (the launch spec from the
   same YAML), waits for ``/health`` and the warm-up generations (:mod:`serving.warmup`).
3. Starts the router (``specgate router``) and waits for ``/ready``.
4. Sends a real workload through the official ``openai`` client: short prompts (streamed and
   not), sampled ones until the sampled class is bypassed on acceptance, greedy ones after them,
   long prompts, the sampled class's **recovery** (its bad estimate expires after
   ``routing.acceptance.max_age_s``; low-temperature sampled requests, still the sampled class,
   are sent to the speculative pool again, measured well, and stay there), a burst of concurrent
   streams past the saturation threshold, and one over-length request. Each step of the
   bypass and recovery is printed as it happens, with the response's ``x-specgate-reason`` and
   ``/ready``'s view of the speculative pool (``summary.recovery`` in the report).
5. Prints each step as it happens (``[+  12.3 s] ...`` lines, before any result), then a table
   of each request's pool, reason, status, time to first token, tokens/s, token counts and
   error code, the speculative pool's accept length as SGLang reports it (``/server_info``
   ``internal_states[0].avg_spec_accept_length``, else ``sglang:spec_accept_length``), and a
   few summary lines (:mod:`serving.democonsole`); the whole summary goes to the JSON report
   (``--report``) only; stops every process it started.

Timings are wall-clock seconds on this machine's CPU: they show the routing, not GPU speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from serving.ports import free_port

__all__ = ["DemoRequest", "DemoStack", "absolute_config", "run_demo", "start_stack"]

PROMPTS_SHORT = [
    "def fibonacci(n):",
    "import os\nimport sys\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):",
]


@dataclass
class DemoRequest:
    """One request of the demo workload and what came back."""

    name: str
    stream: bool
    temperature: float | None = 0.0  # None: left out, the OpenAI SDK's default (sampled, 1.0)
    pool: str | None = None
    reason: str | None = None
    status: int = 0
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error_code: str | None = None
    elapsed_s: float = 0.0
    finish_reason: str | None = None


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str


@dataclass
class _Stack:
    procs: list[_Proc] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait(5)


def absolute_config(src: Path) -> dict[str, Any]:
    """The router config at ``src`` as a document whose file paths (the tokenizer, the pools'
    ``engine.model_path`` and ``speculative_draft_model_path``) are absolute, relative ones
    resolved against ``src``'s folder, so it can be written anywhere."""
    doc: dict[str, Any] = yaml.safe_load(src.read_text())
    base = src.resolve().parent

    def absolute(p: str) -> str:
        return p if p.startswith("/") else str((base / p).resolve())

    doc["model"]["tokenizer"] = absolute(doc["model"]["tokenizer"])
    for pool in doc["pools"]:
        engine = pool.get("engine") or {}
        for key in ("model_path", "speculative_draft_model_path"):
            if key in engine:
                engine[key] = absolute(engine[key])
    return doc


def _prepare_config(src: Path, workdir: Path) -> tuple[Path, dict[str, Any]]:
    doc = absolute_config(src)
    for pool in doc["pools"]:
        pool["endpoints"] = [f"http://127.0.0.1:{free_port()}"]
    doc.setdefault("server", {})["port"] = free_port()
    doc["server"]["host"] = "127.0.0.1"
    out = workdir / "demo-config.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out, doc


def _spawn(name: str, argv: list[str], log: Path, url: str) -> _Proc:
    fh = log.open("wb")
    popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    return _Proc(name, popen, log, url)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


async def _wait_router(url: str, proc: _Proc, timeout_s: float) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"router exited:\n{_tail(proc.log)}")
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                async with s.get(url + "/ready", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.25)
    raise RuntimeError("router not ready in time")


async def _one(client: Any, req: DemoRequest, messages: list[dict[str, str]], max_tokens: int) -> DemoRequest:
    import openai

    sampling = {} if req.temperature is None else {"temperature": req.temperature}
    t0 = time.perf_counter()
    try:
        if req.stream:
            raw = await client.chat.completions.with_raw_response.create(
                model="tiny-llama", messages=messages, max_tokens=max_tokens, stream=True,
                stream_options={"include_usage": True}, **sampling)
            req.pool, req.reason = raw.headers.get("x-specgate-pool"), raw.headers.get("x-specgate-reason")
            req.status = raw.http_response.status_code
            stream = raw.parse()
            first = None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content and first is None:
                    first = time.perf_counter()
                if chunk.choices and chunk.choices[0].finish_reason:
                    req.finish_reason = chunk.choices[0].finish_reason
                if chunk.usage is not None:
                    req.completion_tokens = chunk.usage.completion_tokens
                    req.prompt_tokens = chunk.usage.prompt_tokens
            end = time.perf_counter()
            if first is not None:
                req.ttft_s = first - t0
                if req.completion_tokens and end > first:
                    req.tokens_per_s = max(req.completion_tokens - 1, 1) / (end - first)
        else:
            raw = await client.chat.completions.with_raw_response.create(
                model="tiny-llama", messages=messages, max_tokens=max_tokens, **sampling)
            req.pool, req.reason = raw.headers.get("x-specgate-pool"), raw.headers.get("x-specgate-reason")
            req.status = raw.http_response.status_code
            resp = raw.parse()
            end = time.perf_counter()
            req.ttft_s = end - t0
            req.completion_tokens = resp.usage.completion_tokens
            req.prompt_tokens = resp.usage.prompt_tokens
            req.tokens_per_s = resp.usage.completion_tokens / (end - t0)
            req.finish_reason = resp.choices[0].finish_reason
    except openai.APIStatusError as exc:
        req.status = exc.status_code
        req.pool = exc.response.headers.get("x-specgate-pool")
        req.reason = exc.response.headers.get("x-specgate-reason")
        body = exc.body if isinstance(exc.body, dict) else {}
        req.error_code = (body.get("error") or body).get("code") if isinstance(body, dict) else None
    req.elapsed_s = time.perf_counter() - t0
    return req


async def _ready(router_url: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(router_url + "/ready") as r:
        return await r.json()


def _spec_view(ready: dict[str, Any], pool: str) -> dict[str, Any]:
    """``/ready``'s acceptance view of one speculative pool: bypassed classes, estimates, ages."""
    view = ready.get("pools", {}).get(pool, {})
    est = view.get("accept_length_estimate") or {}
    return {"low_acceptance_classes": view.get("low_acceptance_classes"),
            "accept_length_estimate": {c: None if v is None else round(v, 3) for c, v in est.items()},
            "acceptance_age_s": {c: (view.get("signal_age_s") or {}).get(f"acceptance_{c}") for c in est}}


class _Steps:
    """The bypass-and-recovery timeline: printed as it happens, kept for the report."""

    def __init__(self, router_url: str, pool: str, say: Any) -> None:
        self.router_url, self.pool, self.say = router_url, pool, say
        self.t0 = time.monotonic()
        self.rows: list[dict[str, Any]] = []

    async def note(self, step: str, req: DemoRequest | None = None) -> dict[str, Any]:
        view = _spec_view(await _ready(self.router_url), self.pool)
        row: dict[str, Any] = {"t_s": round(time.monotonic() - self.t0, 2), "step": step, **view}
        if req is not None:
            row.update(request=req.name, temperature=req.temperature, pool=req.pool, reason=req.reason,
                       status=req.status)
        self.rows.append(row)
        est = view["accept_length_estimate"].get("sampled")
        head = (f"{req.name} (temperature {1.0 if req.temperature is None else req.temperature}) -> "
                f"{req.status} pool {req.pool}, x-specgate-reason: {req.reason}; " if req else "")
        self.say(f"[recovery +{row['t_s']:6.2f}s] {step}: {head}/ready: sampled tau "
                 f"{'unknown' if est is None else f'{est:.2f}'}, bypassed {view['low_acceptance_classes']}")
        return view


async def _until(predicate: Any, timeout_s: float, poll_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(poll_s)
    return False


async def _pools_idle(router_url: str) -> bool:
    """Whether every pool's ``specgate_pool_load`` (the router's view: the last scrape's running +
    queued, or its in-flight count) is 0. The demo sends one request at a time, so a non-zero
    load between requests is a scrape taken before the previous request ended; a request sent
    then can meet ``plain_busier`` (a bypass is never moved to a busier pool)."""
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(router_url + "/metrics") as r:
        text = await r.text()
    loads = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("specgate_pool_load{")]
    return bool(loads) and all(v == 0 for v in loads)


async def _workload(router_url: str, long_prompt_tokens: int, burst: int, *, spec_pool: str = "spec",
                    max_age_s: float = 10.0, exit_accept_length: float = 0.0,
                    say: Any = print) -> tuple[list[DemoRequest], dict[str, Any], list[dict[str, Any]]]:
    """The demo's requests in order, ``/ready``'s speculative-pool view after the sampled ones,
    and the bypass-and-recovery steps (:class:`_Steps` rows).

    ``exit_accept_length`` (tokens per verify step) is the accept length at which the
    acceptance bypass turns off (``routing.acceptance.exit_speedup * (c * gamma + 1)``).
    """
    import openai

    client = openai.AsyncOpenAI(base_url=router_url + "/v1", api_key="demo", max_retries=0, timeout=300)
    out: list[DemoRequest] = []
    steps = _Steps(router_url, spec_pool, say)
    user = lambda text: [{"role": "user", "content": text}]
    for i, prompt in enumerate(PROMPTS_SHORT):
        out.append(await _one(client, DemoRequest(f"short-{i}", stream=bool(i % 2)), user(prompt), 48))
    # Sampled requests as the OpenAI SDK sends them by default (no temperature: 1.0), until one
    # is bypassed. Their acceptance is tracked apart from greedy requests', so they cannot switch
    # speculation off for greedy traffic.
    for i in range(8):
        r = await _one(client, DemoRequest(f"sampled-{i}", stream=bool(i % 2), temperature=None),
                       user(PROMPTS_SHORT[i % 4]), 48)
        out.append(r)
        await steps.note("sampled request", r)
        if r.reason == "low_acceptance" and i >= 3:
            break
    await asyncio.sleep(1.0)  # a few scrape rounds: the sampled measurements are taken in
    after_sampled = await _ready(router_url)
    for i, prompt in enumerate(PROMPTS_SHORT[:2]):
        r = await _one(client, DemoRequest(f"greedy-after-sampled-{i}", stream=False), user(prompt), 48)
        out.append(r)
        await steps.note("greedy request while sampled is bypassed", r)
    long_text = "\n".join(f"def function_{i}(x):\n    return x * {i}\n" for i in range(long_prompt_tokens // 6))
    for name, stream in (("long-stream", True), ("long", False)):
        await _until(lambda: _pools_idle(router_url), 5.0)  # the previous request's end scraped
        out.append(await _one(client, DemoRequest(name, stream=stream), user(long_text), 32))
    # Recovery. The sampled estimate is used for max_age_s after its last observation; older it
    # is unknown, the bypass turns off, and the class is measured again. Sampled requests at a
    # low temperature (still the sampled class) accept nearly as many draft tokens as greedy
    # ones: measured well, the class stays on the speculative pool. The first reading after the
    # wait can also cover the greedy requests above (their steps since the engine's last gauge
    # refresh): both classes take that mixed reading, and when the tiny drafter's figure for it
    # falls below break-even both are bypassed until it expires in turn. So the probes go on
    # (to the plain pool meanwhile) for up to two more max_age_s, until two in a row measure well.
    async def expired() -> bool:
        return "sampled" not in (_spec_view(await _ready(router_url), spec_pool)["low_acceptance_classes"] or [])
    await steps.note(f"waiting for the sampled estimate to expire (routing.acceptance.max_age_s {max_age_s:g} s)")
    if await _until(expired, max_age_s + 10.0):
        await steps.note("sampled estimate expired: the bypass is off, the class is measured again")
    good = 0
    until = asyncio.get_running_loop().time() + 2 * max_age_s + 5.0
    for i in range(60):
        if i >= 10 and asyncio.get_running_loop().time() > until:
            break
        r = await _one(client, DemoRequest(f"recover-{i}", stream=bool(i % 2), temperature=0.1),
                       user(PROMPTS_SHORT[i % 4]), 48)
        out.append(r)
        await asyncio.sleep(0.6)  # two scrape rounds: a new gauge reading is taken in
        view = await steps.note("sampled request at low temperature", r)
        est = view["accept_length_estimate"].get("sampled")
        measured = est is not None and est >= exit_accept_length and "sampled" not in (
            view["low_acceptance_classes"] or [])
        good = good + 1 if measured and r.reason == "speculative" else 0
        if good >= 2:
            break
    for i in range(2):
        r = await _one(client, DemoRequest(f"sampled-after-recovery-{i}", stream=bool(i % 2), temperature=0.1),
                       user(PROMPTS_SHORT[i % 4]), 48)
        out.append(r)
        await steps.note("sampled request after recovery", r)
    burst_reqs = [DemoRequest(f"burst-{i}", stream=True) for i in range(burst)]
    out += await asyncio.gather(*(_one(client, r, user(PROMPTS_SHORT[i % 4]), 48)
                                  for i, r in enumerate(burst_reqs)))
    huge = "x " * 6000
    out.append(await _one(client, DemoRequest("over-length", stream=True), user(huge), 16))
    await client.close()
    return out, after_sampled, steps.rows


async def _accept_length(url: str) -> tuple[float | None, str]:
    import aiohttp

    from router import parse_sglang_metrics

    async with aiohttp.ClientSession() as s:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, IndexError):
            async with s.get(url + "/server_info", timeout=aiohttp.ClientTimeout(total=10)) as r:
                info = await r.json()
                value = info["internal_states"][0].get("avg_spec_accept_length")
                if value:
                    return float(value), "server_info.internal_states[0].avg_spec_accept_length"
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with s.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
                value = parse_sglang_metrics(await r.text()).spec_accept_length
                if value:
                    return value, "metrics.sglang:spec_accept_length"
    return None, "unavailable"


def run_demo(config: Path, report: Path, *, warmup: int = 3, burst: int = 12, keep_logs: Path | None = None) -> int:
    """Run the demo; returns 0 when every expectation held, 1 otherwise.

    Raises:
        RuntimeError: when a server fails to start (its log tail is included).
    """
    from rich.console import Console
    from rich.table import Table

    from serving import democonsole as dc
    from serving.warmup import wait_ready

    console = Console(width=None if sys.stdout.isatty() else 160)
    workdir = Path(tempfile.mkdtemp(prefix="specgate-demo-"))
    logs = keep_logs or workdir
    logs.mkdir(parents=True, exist_ok=True)
    cfg_path, doc = _prepare_config(config, workdir)
    stack = _Stack()
    py = sys.executable
    t_start = time.monotonic()

    def say(text: str) -> None:  # progress, printed as it happens (before the results)
        console.print(dc.progress_line(time.monotonic() - t_start, text), markup=False, highlight=False)

    try:
        for pool in doc["pools"]:
            url = pool["endpoints"][0]
            proc = _spawn(pool["name"], [py, "-m", "router.cli", "serve", "--config", str(cfg_path),
                                         "--pool", pool["name"]], logs / f"pool-{pool['name']}.log", url)
            stack.procs.append(proc)
            say(f"starting SGLang pool {pool['name']} at {url}")

        async def warm_all() -> dict[str, Any]:
            async def warm(proc: _Proc) -> Any:
                try:
                    res = await wait_ready(proc.url, count=warmup, timeout_s=600,
                                           alive=lambda: proc.popen.poll() is None)
                except Exception as exc:  # noqa: BLE001  any failure: report it with the pool's log
                    raise RuntimeError(f"pool {proc.name} failed: {exc}\n{_tail(proc.log)}") from None
                say(f"pool {proc.name} ready: healthy after {res.health_s:.1f} s, warm-up "
                    + ", ".join(f"{t:.2f}s" for t in res.generation_s))
                return res
            return dict(zip([p.name for p in stack.procs], await asyncio.gather(*(warm(p) for p in stack.procs))))

        warm = asyncio.run(warm_all())
        router_url = f"http://127.0.0.1:{doc['server']['port']}"
        say(f"starting router at {router_url}")
        router = _spawn("router", [py, "-m", "router.cli", "router", "--config", str(cfg_path), "--json-logs"],
                        logs / "router.log", router_url)
        stack.procs.append(router)
        asyncio.run(_wait_router(router_url, router, 120))
        say(f"router ready at {router_url}; sending the workload through the openai client")
        from router import load_config

        cfg = load_config(cfg_path)
        spec_cfg = next(p for p in cfg.pools if p.speculative)
        acc = cfg.routing.acceptance
        exit_tau = acc.exit_speedup * (spec_cfg.drafter_cost_ratio * spec_cfg.gamma + 1)
        results, after_sampled, recovery = asyncio.run(_workload(
            router_url, cfg.routing.long_prompt_tokens, burst, spec_pool=spec_cfg.name,
            max_age_s=acc.max_age_s, exit_accept_length=exit_tau, say=say))
        say(f"workload done: {len(results)} requests")

        spec_pools = [p for p in doc["pools"] if p.get("speculative")]
        views = asyncio.run(_ready(router_url)).get("pools", {})  # after the workload
        pools: dict[str, Any] = {}
        for pool in doc["pools"]:
            served = sum(1 for r in results if r.pool == pool["name"] and r.status == 200)
            view = views.get(pool["name"]) or {}
            # the router's checked predictions and learned speed model (null with learning off)
            entry: dict[str, Any] = {"served": served, "speculative": bool(pool.get("speculative")),
                                     "warmup_s": list(warm[pool["name"]].generation_s),
                                     "prediction": view.get("prediction"), "speed_model": view.get("speed_model")}
            pred = entry["prediction"] or {}
            if pred.get("checks"):
                say(f"pool {pool['name']}: the router's completion-time predictions, median relative error "
                    f"{pred['median_relative_error']} over {pred['checks']} requests")
            if pool in spec_pools:
                value, source = asyncio.run(_accept_length(pool["endpoints"][0]))
                entry["accept_length"], entry["accept_length_source"] = value, source
                entry["speculative_algorithm"] = (pool.get("engine") or {}).get("speculative_algorithm")
            else:
                entry["accept_length"] = None
            pools[pool["name"]] = entry

        table = Table(title="specgate demo: each request")
        for col in dc.TABLE_COLUMNS:
            table.add_column(col)
        for r in results:
            table.add_row(*dc.table_row(r))
        console.print(table)
        reasons: dict[str, int] = {}
        for r in results:
            reasons[r.reason or "none"] = reasons.get(r.reason or "none", 0) + 1
        checks = {
            "both_pools_served": all(p["served"] > 0 for p in pools.values()),
            "over_length_rejected": any(r.name == "over-length" and r.status == 400
                                        and r.error_code == "context_length_exceeded" for r in results),
            "saturation_bypass_seen": reasons.get("saturated", 0) > 0,
            "long_context_routed_plain": all(r.pool == "plain" for r in results if r.name.startswith("long")),
            "spec_accept_length_reported": all(p.get("accept_length") for n, p in pools.items()
                                               if p["speculative"]),
            "sampled_requests_served": all(r.status == 200 for r in results if r.name.startswith("sampled")),
            "greedy_still_speculative_after_sampled": all(
                r.pool in {p["name"] for p in spec_pools} for r in results if r.name.startswith("greedy-after")),
            "sampled_bypassed_on_acceptance": any(r.name.startswith("sampled-") and r.reason == "low_acceptance"
                                                  for r in results),
            "sampled_estimate_expired": any(s["step"].startswith("sampled estimate expired") for s in recovery),
            "sampled_back_on_spec_after_recovery": _recovered(results, recovery, exit_tau),
            "every_200_has_finish_reason_and_usage": all(
                r.finish_reason and r.prompt_tokens and r.completion_tokens for r in results if r.status == 200),
        }
        spec_view = {name: {k: v for k, v in view.items() if k in (
            "accept_length_estimate", "low_acceptance_classes", "signal_age_s")}
            for name, view in after_sampled.get("pools", {}).items() if name in {p["name"] for p in spec_pools}}
        console.print(dc.ready_line(spec_view), markup=False, highlight=False)
        summary = {"requests": len(results), "by_reason": reasons, "after_sampled": spec_view,
                   "recovery": recovery, "recovery_exit_accept_length": round(exit_tau, 3),
                   "ok": sum(r.status == 200 for r in results), "elapsed_s": round(time.monotonic() - t_start, 1),
                   "checks": checks}
        for line in dc.summary_lines(summary, pools):
            console.print(line, markup=False, highlight=False)
        report.write_text(json.dumps({"requests": [asdict(r) for r in results], "pools": pools,
                                      "summary": summary, "config": str(config)}, indent=2))
        console.print(f"report (summary, recovery steps, every request) written to {report}; logs in {logs}",
                      markup=False, highlight=False)
        return 0 if all(checks.values()) else 1
    finally:
        stack.stop()


@dataclass
class DemoStack:
    """A started demo stack (:func:`start_stack`): call :meth:`stop` when done.

    Attributes:
        doc: the rewritten config (free ports); config_path: its file; router_url: the router.
        warmup: per pool name, its :class:`serving.warmup.WarmupResult`; logs: the server logs.
    """

    doc: dict[str, Any]
    config_path: Path
    router_url: str
    warmup: dict[str, Any]
    logs: Path
    procs: _Stack

    def stop(self) -> None:
        """Stop every process the stack started (SIGTERM, then SIGKILL after 20 s)."""
        self.procs.stop()


def start_stack(config: Path, logs: Path, *, warmup: int = 3, timeout_s: float = 600.0) -> DemoStack:
    """Start every pool of ``config`` (real SGLang, ``specgate serve``) and the router on free
    ports of 127.0.0.1, as the demo does (steps 1-3 of the module docstring), without its output.

    Raises:
        RuntimeError: a server failed to start (its log tail is included); what started is stopped.
    """
    from serving.warmup import wait_ready

    logs.mkdir(parents=True, exist_ok=True)
    cfg_path, doc = _prepare_config(config, logs)
    procs = _Stack()
    py = sys.executable
    try:
        for pool in doc["pools"]:
            procs.procs.append(_spawn(pool["name"], [py, "-m", "router.cli", "serve", "--config", str(cfg_path),
                                                     "--pool", pool["name"]], logs / f"pool-{pool['name']}.log",
                                      pool["endpoints"][0]))

        async def warm(proc: _Proc) -> Any:
            try:
                return await wait_ready(proc.url, count=warmup, timeout_s=timeout_s,
                                        alive=lambda: proc.popen.poll() is None)
            except Exception as exc:  # noqa: BLE001  any failure: report it with the pool's log
                raise RuntimeError(f"pool {proc.name} failed: {exc}\n{_tail(proc.log)}") from None

        async def warm_all() -> list[Any]:
            return list(await asyncio.gather(*(warm(p) for p in procs.procs)))

        warmed = dict(zip([p.name for p in procs.procs], asyncio.run(warm_all())))
        router_url = f"http://127.0.0.1:{doc['server']['port']}"
        router = _spawn("router", [py, "-m", "router.cli", "router", "--config", str(cfg_path), "--json-logs"],
                        logs / "router.log", router_url)
        procs.procs.append(router)
        asyncio.run(_wait_router(router_url, router, 120))
    except BaseException:
        procs.stop()
        raise
    return DemoStack(doc, cfg_path, router_url, warmed, logs, procs)


def _recovered(results: list[DemoRequest], recovery: list[dict[str, Any]], exit_tau: float) -> bool:
    """The sampled class is back on the speculative pool: a low-temperature probe was measured
    there at or above the bypass's exit accept length with the class not bypassed (``/ready``),
    and the sampled requests after it went there as ``speculative`` (the estimate may have aged
    out again by then on a slow machine: unknown is not bad)."""
    after = [r for r in results if r.name.startswith("sampled-after-recovery")]
    measured = any(s["step"] == "sampled request at low temperature" and s.get("reason") == "speculative"
                   and (s["accept_length_estimate"].get("sampled") or 0.0) >= exit_tau
                   and "sampled" not in (s["low_acceptance_classes"] or []) for s in recovery)
    return measured and bool(after) and all(r.status == 200 and r.reason == "speculative" for r in after)


def _demo(args: argparse.Namespace) -> int:
    return run_demo(Path(args.config), Path(args.report), warmup=args.warmup, burst=args.burst,
                    keep_logs=Path(args.logs) if args.logs else None)


def add_demo_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``specgate demo``."""
    d = sub.add_parser("demo", help="run the router and local SGLang pools on a real workload")
    d.add_argument("--config", default="examples/demo.yaml", help="the demo stack's operator YAML (default examples/demo.yaml)")
    d.add_argument("--report", default="demo-report.json", help="where to write the JSON report (default demo-report.json)")
    d.add_argument("--warmup", type=int, default=3, help="warm-up generations per pool")
    d.add_argument("--burst", type=int, default=12, help="concurrent streams in the saturation burst")
    d.add_argument("--logs", default=None, help="directory for server logs (default: a temp dir)")
    d.set_defaults(func=_demo)
