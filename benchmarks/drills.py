"""Reliability drills: faults injected into a live router under load (docs/reliability.md).

    .venv/bin/python benchmarks/drills.py [--quick] [--drills kill,freeze,...] [--seed 0]
        [--out runs/drills.json]

Every drill starts its own stack on 127.0.0.1, as separate processes so that they can be
killed and stopped: fake SGLang engines (``serving/fake_sglang/``'s app under uvicorn, one
process each, launched by this script's ``_engine`` mode so that ``FakeConfig`` can be set
whole: every engine *ignores* client disconnects, ``on_disconnect: "ignore"``, as SGLang
does when its cleanup regresses, sgl-project/sglang#37833, so only the router's
``/abort_request`` stops a generation) and the router (``python -m router.cli router``). A few
clients (:mod:`benchmarks.drill_load`) send a seeded mix of streamed and non-streamed, greedy
and sampled chat completions through the router while the fault is injected:

==========  ===============================================================================
kill        one of the two ``spec`` engines SIGKILLed while it streams, restarted 40% later
freeze      one ``spec`` engine SIGSTOPped for ``--freeze-s`` seconds, then SIGCONT
redis       ``state.backend: redis`` on a real ``redis-server``, SIGSTOPped (a blackhole:
            the kernel accepts, nothing answers) for ``--freeze-s`` seconds, then SIGCONT
config      the config file rewritten non-atomically (truncated, then written in 4 pieces
            0.15 s apart) every second, alternating two valid configs, while the router
            polls it every 0.1 s
roll        the router SIGTERMed with streams in flight (``router/front/drain.py``), a new router
            started on the same port once the old one exited; clients retry refused
            connections
discovery   the ``spec`` pool discovered from EndpointSlices of a fake Kubernetes API
            (``tests/support/fake_kube.py``); three engines' endpoints removed, re-added and
            turned not-ready, one change every 0.3 s
storm       clients close 30% of requests before the headers (mid-prefill) and 30% of
            streams after 1-4 events, and every client drops its request at the end
headers     rounds of two connections streaming 48 MiB of header bytes each in 64 KiB
            writes, never ending the head (``server.headers`` answers 431 and discards the
            rest); notes: floods whose writer read the 431, the router's RSS growth, the
            431s counted
clients     HTTP/1.0 (streamed and not), ``Expect: 100-continue`` (HTTP/1.1 and 1.0) and
            ``Upgrade: h2c``-offering clients on raw sockets, three at a time beside the
            load; notes: right answers per kind and any wrong one
bomb        gzip bombs (48 MiB of prompt text in ~47 KiB, ``limits.max_request_bytes`` 32
            MiB) sent every 0.5 s; notes: their statuses (413), the router's RSS growth
smaller     one ``spec`` engine SIGKILLed while it streams and started again on the same port
            with ``--context-length 1024`` (the pool's cap: 2048); once the router reads it, 6
            chats of about 1,500 prompt tokens; notes: their statuses and pools (the other
            ``spec`` engine still holds them), the 400s the smaller engine answered (0: the
            router routes where they fit), the engines' limits as ``/ready`` shows them
reuse       one ``spec`` engine SIGKILLed while it streams and its port taken by a server of
            another model; notes: the chats that reached it (0), the endpoint's ``/ready``
            reason
sentinel    ``state.topology: sentinel`` on a real primary, replica and three sentinels, a
            failover at 30% of the load (:mod:`benchmarks.drill_redis`)
reshard     ``state.topology: cluster`` on three real cluster masters, the deployment's slot
            resharded to another node at 30% of the load (:mod:`benchmarks.drill_redis`)
==========  ===============================================================================

After the load stops, the drill waits (up to 10 s) for the router's in-flight gauges
(``specgate_inflight_requests``, ``router/ops/metrics.py``) to read 0, then (up to 1 s) for every
engine to report no running or queued generation (``GET /_fake/state``), and reports the
leases and generations still there: ``leases_left`` and ``orphans`` (an orphan is a generation
an engine still runs with no router lease for it). The load's verdicts are those of
:mod:`benchmarks.drill_load`. Prints a markdown table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.drill_front_door import bomb, clients, headers
from benchmarks.drill_load import LoadPlan, run_load
from benchmarks.drill_redis import TOPOLOGY_DRILLS, setup_topology
from benchmarks.router_overhead import free_port, stop_processes, wait_http

DRILLS = ("kill", "freeze", "redis", "config", "roll", "discovery", "storm", "headers", "bomb", "clients", "smaller",
          "reuse",
          *TOPOLOGY_DRILLS)
COLUMNS = ("sent", "completed", "clean_error", "fabricated", "bad_error", "transport_before", "transport_mid",
           "hung", "client_closed", "leases_left", "orphans", "unaborted")
#: Every engine: the tests' tiny-llama identity, a 0.1 s prefill, 25 ms per decode step.
ENGINE: dict[str, Any] = {"model_name": "tiny-llama", "context_length": 4096, "prefill_delay_s": 0.1,
                          "decode_step_s": 0.025, "on_disconnect": "ignore", "max_log_entries": 20000}
SPEC = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "spec_accept_length": 2.5}


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


class Procs:
    """Child processes of one drill (own sessions, logs in ``work``), stopped by :meth:`close`."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, cmd: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.work / log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
                                 env={**os.environ, **(env or {})})
        self.procs.append(p)
        return p

    def close(self) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            os.killpg(p.pid, signal.SIGCONT)
        stop_processes(alive)


class Engine:
    """One fake SGLang engine process at ``http://host:port``."""

    def __init__(self, procs: Procs, name: str, spec: bool, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.procs, self.name, self.host = procs, name, host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self.config = {**ENGINE, **(SPEC if spec else {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Engine:
        self.proc = self.procs.spawn([sys.executable, str(Path(__file__)), "_engine", self.host, str(self.port),
                                      json.dumps(self.config)], f"{self.name}.log")
        wait_http(self.url + "/health", 120)
        return self

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)

    def running(self, min_generated: int = 0) -> int:
        """Generations running or queued (0 for a dead engine: a new process knows none); with
        ``min_generated``, only running ones that produced at least that many tokens."""
        try:
            doc = json.loads(_get(self.url + "/_fake/state"))
        except OSError:
            return 0
        if min_generated:
            return sum(1 for s in doc["running"] if s["generated"] >= min_generated)
        return len(doc["running"]) + len(doc["queued"])

    def unaborted(self) -> int:
        """Generations whose connection the router closed early and whose rid no
        ``/abort_request`` named (this engine ignores disconnects: each ran on to its limit)."""
        try:
            doc = json.loads(_get(self.url + "/_fake/requests"))
        except OSError:
            return 0
        aborted = {a["rid"] for a in doc["aborts"]}
        return sum(1 for r in doc["requests"] if r["client_disconnected"] and not aborted & set(r["rids"]))


class Router:
    """The router process (``python -m router.cli router``) on ``port``."""

    def __init__(self, procs: Procs, config: Path, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.procs, self.config, self.env = procs, config, env
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Router:
        self.starts += 1
        self.proc = self.procs.spawn([sys.executable, "-m", "router.cli", "router", "--config", str(self.config),
                                      "--port", str(self.port)], f"router-{self.starts}.log", self.env)
        wait_http(self.url + "/ready", 300)  # minutes on a loaded 2-core machine
        return self

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as ``{'name{labels}': value}``."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(_get(self.url + "/metrics").decode()):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
        return out

    def metric(self, prefix: str) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith(prefix + "{"))

    def inflight(self) -> float:
        return self.metric("specgate_inflight_requests")


async def _until(pred: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if await asyncio.to_thread(pred):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)


def _config(tokenizer: Path, spec: list[Engine], plain: Engine | None, **overrides: Any) -> dict[str, Any]:
    from tests.support.config import router_config

    doc = router_config(tokenizer, spec[0].url if spec else None, plain.url if plain else None, **{
        "scrape": {"interval_s": 0.25, "timeout_s": 0.5, "stale_after_s": 1.5},
        "upstream": {"first_byte_timeout_s": 2.0, "idle_timeout_s": 1.5, "nonstream_timeout_s": 6.0,
                     "abort_timeout_s": 0.5},
        "server": {"reload_interval_s": 0.1, "log_requests": False, "drain_listen_s": 0.5,
                   "drain_timeout_s": 1.5}, **overrides})
    if spec:
        doc["pools"][0]["endpoints"] = [e.url for e in spec]
    return doc


class Drill:
    """One drill's stack and measurements (see the module docstring)."""

    def __init__(self, name: str, args: argparse.Namespace, work: Path) -> None:
        self.name, self.args = name, args
        self.work = work / name
        self.work.mkdir(parents=True)
        self.procs = Procs(self.work)
        self.rng = random.Random(f"{args.seed}:{name}")
        self.engines: list[Engine] = []
        self.router: Router | None = None
        self.notes: dict[str, Any] = {}
        self.cleanups: list[Callable[[], Any]] = []
        self.after: Callable[[], dict[str, Any]] | None = None  # extra measurements after the settle

    def engine(self, name: str, spec: bool, **kw: Any) -> Engine:
        e = Engine(self.procs, name, spec, **kw).start()
        self.engines.append(e)
        return e

    def write_config(self, doc: dict[str, Any]) -> Path:
        from tests.support.config import write_router_yaml

        return write_router_yaml(self.work / "router.yaml", doc)

    def basic(self, **overrides: Any) -> Router:
        """Two ``spec`` engines, one ``plain`` engine and the router."""
        spec = [self.engine("spec-a", True), self.engine("spec-b", True)]
        plain = self.engine("plain", False)
        self.router = Router(self.procs, self.write_config(_config(self.args.tokenizer, spec, plain, **overrides)))
        return self.router.start()

    async def run(self, fault: Callable[[Drill, asyncio.Event], Awaitable[None]], plan: LoadPlan) -> dict[str, Any]:
        """Load + ``fault`` for ``args.duration`` s (the fault may end it later), then settle."""
        assert self.router is not None
        stop = asyncio.Event()
        load = asyncio.create_task(run_load(self.router.url, plan, stop))
        t0 = time.monotonic()
        await fault(self, stop)
        await asyncio.sleep(max(0.0, t0 + self.args.duration - time.monotonic()))
        stop.set()
        tally = await load
        router = self.router
        await _until(lambda: router.inflight() == 0, 10)
        leases = router.inflight()
        await _until(lambda: sum(e.running() for e in self.engines) == 0, 1)
        orphans = {e.name: e.running() for e in self.engines}
        unaborted = sum(e.unaborted() for e in self.engines)
        if self.after is not None:
            self.notes.update(await asyncio.to_thread(self.after))
        m = await asyncio.to_thread(router.metrics)
        self.notes["router_counters"] = {  # what the router did (its process since the last start)
            key: sum(v for k, v in m.items() if k.startswith(f"specgate_{key}_total{{"))
            for key in ("upstream_failures", "upstream_aborts", "upstream_stale_connection_retries")}
        return {"drill": self.name, **tally.as_dict(), "leases_left": leases, "orphans": sum(orphans.values()),
                "unaborted": unaborted,
                "orphans_by_engine": orphans, "wall_s": round(time.monotonic() - t0, 1), **self.notes}

    async def busy(self, engine: Engine, timeout_s: float = 10.0) -> None:
        """Wait until ``engine`` runs at least two generations past their third token (so the
        fault hits them mid-decode, streams past their first relayed byte)."""
        await _until(lambda: engine.running(min_generated=3) >= 2, timeout_s)


# -- the faults --------------------------------------------------------------------------------

async def kill(d: Drill, stop: asyncio.Event) -> None:
    a = d.engines[0]
    await asyncio.sleep(d.args.duration * 0.25)
    await d.busy(a)
    d.notes["killed_with_running"] = a.running()
    a.signal(signal.SIGKILL)
    await asyncio.sleep(d.args.duration * 0.4)
    await asyncio.to_thread(a.start)


async def freeze(d: Drill, stop: asyncio.Event) -> None:
    a = d.engines[0]
    await asyncio.sleep(d.args.duration * 0.2)
    await d.busy(a)
    d.notes["frozen_with_running"] = a.running()
    a.signal(signal.SIGSTOP)
    await asyncio.sleep(d.args.freeze_s)
    a.signal(signal.SIGCONT)


async def redis_blackhole(d: Drill, stop: asyncio.Event) -> None:
    server = d.notes.pop("_redis")
    await asyncio.sleep(d.args.duration * 0.2)
    server.pause()
    await asyncio.sleep(d.args.freeze_s)
    server.resume()


async def config_rewrite(d: Drill, stop: asyncio.Event) -> None:
    assert d.router is not None
    docs = d.notes.pop("_docs")
    path = d.router.config
    t_end = time.monotonic() + d.args.duration - 1.0
    writes = 0
    while time.monotonic() < t_end:
        data = docs[writes % 2].encode()
        cuts = sorted(d.rng.sample(range(1, len(data)), 3))
        await asyncio.to_thread(_write_in_pieces, path, data, cuts, 0.15)
        writes += 1
        await asyncio.sleep(1.0)
    d.notes["rewrites"] = writes
    m = await asyncio.to_thread(d.router.metrics)
    d.notes["reloads"] = {r: m.get(f'specgate_config_reloads_total{{result="{r}"}}', 0.0)
                          for r in ("success", "failure")}
    # each rewrite changes the file once: more successes than rewrites = half-written files applied
    d.notes["partial_configs_applied"] = max(0.0, d.notes["reloads"]["success"] - writes)


def _write_in_pieces(path: Path, data: bytes, cuts: list[int], gap_s: float) -> None:
    """Truncate ``path`` in place, then write ``data`` split at ``cuts``, ``gap_s`` seconds
    before each piece (each flushed and fsynced): what a non-atomic writer leaves to a poller."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.flush()
        for lo, hi in zip([0, *cuts], [*cuts, len(data)], strict=True):
            time.sleep(gap_s)  # the duration is the drill: a writer pausing between pieces
            f.write(data[lo:hi])
            f.flush()
            os.fsync(f.fileno())


async def roll(d: Drill, stop: asyncio.Event) -> None:
    old = d.router
    assert old is not None and old.proc is not None
    await asyncio.sleep(d.args.duration * 0.3)
    await d.busy(d.engines[0])
    old.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(old.proc.wait, 30)
    log = (d.work / "router-1.log").read_text().splitlines()
    d.notes["old_router_exit"] = code
    d.notes["old_router_drain_log"] = next((line.split(" ", 3)[-1] for line in log if "drain" in line.lower()
                                            and ("drained" in line or "cut" in line)), None)
    await asyncio.to_thread(old.start)  # the same port, a new process


async def churn(d: Drill, stop: asyncio.Event) -> None:
    api, make = d.notes.pop("_api"), d.notes.pop("_slice")
    t_end = time.monotonic() + d.args.duration - 1.0
    changes = 0
    while time.monotonic() < t_end:
        pods = {i: d.rng.random() < 0.75 for i in range(1, 4) if d.rng.random() < 0.7}
        if not any(pods.values()):
            pods[d.rng.randint(1, 3)] = True
        api.apply(make(pods))
        changes += 1
        await asyncio.sleep(0.3)
    api.apply(make({1: True, 2: True, 3: True}))
    d.notes["slice_changes"] = changes


async def storm(d: Drill, stop: asyncio.Event) -> None:
    return None


def _ready_pool(d: Drill, pool: str) -> dict[str, Any]:
    assert d.router is not None
    try:
        return dict(json.loads(_get(d.router.url + "/ready"))["pools"][pool])
    except OSError:  # 503 while nothing is ready
        return {}


def _post_chat(url: str, words: int) -> tuple[int, str]:
    body = json.dumps({"model": "tiny-llama", "max_tokens": 16,
                       "messages": [{"role": "user", "content": " ".join(["the"] * words)}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("x-specgate-pool", "")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


async def _replace_engine(d: Drill, **flags: Any) -> Engine:
    """SIGKILL the first ``spec`` engine mid-stream; start another process on its port with ``flags``."""
    a = d.engines[0]
    await asyncio.sleep(d.args.duration * 0.25)
    await d.busy(a)
    a.signal(signal.SIGKILL)
    a.config = {**a.config, **flags}
    await asyncio.to_thread(a.start)
    return a


async def smaller(d: Drill, stop: asyncio.Event) -> None:
    a = await _replace_engine(d, context_length=1024)
    await _until(lambda: _ready_pool(d, "spec").get("engine_context_tokens", {}).get(a.url) == 1024, 10)
    assert d.router is not None
    answers = [await asyncio.to_thread(_post_chat, d.router.url, 1500) for _ in range(6)]
    log = json.loads(_get(a.url + "/_fake/requests"))["requests"]
    d.notes.update(long_chats=[f"{status} {pool}" for status, pool in answers],
                   engine_400s=sum(1 for r in log if r["status"] == 400),
                   engine_context=_ready_pool(d, "spec").get("engine_context_tokens"))


async def reuse(d: Drill, stop: asyncio.Event) -> None:
    a = await _replace_engine(d, model_name="other-model")
    await _until(lambda: a.url in _ready_pool(d, "spec").get("unhealthy", {}), 10)
    await asyncio.sleep(max(0.0, d.args.duration * 0.5))
    log = json.loads(_get(a.url + "/_fake/requests"))["requests"]
    d.notes.update(reached_other=sum(1 for r in log if r["path"] == "/v1/chat/completions"),
                   ready=_ready_pool(d, "spec").get("unhealthy", {}).get(a.url))


# -- the drills' stacks ------------------------------------------------------------------------

def setup(d: Drill, plan: LoadPlan) -> tuple[Callable[[Drill, asyncio.Event], Awaitable[None]], LoadPlan]:
    """Build drill ``d``'s stack; returns its fault and load plan."""
    name = d.name
    if name in TOPOLOGY_DRILLS:
        return setup_topology(d, plan)
    if name == "redis":
        from tests.redis.cluster import RedisServer

        server = RedisServer().start()
        d.cleanups.append(server.stop)
        d.notes["_redis"] = server

        def after() -> dict[str, Any]:
            client = server.client()
            try:
                keys = list(client.scan_iter("{drill}:inflight:*"))
                left = sum(int(client.zcard(k)) for k in keys)
            finally:
                client.close()
            assert d.router is not None
            m = d.router.metrics()
            return {"redis_leases_left": left,
                    "degraded_entries": sum(v for k, v in m.items()
                                            if k.startswith("specgate_shared_state_degraded_entries_total"))}

        d.after = after
        d.basic(state={"backend": "redis", "redis_url": server.url, "key_prefix": "drill", "op_timeout_s": 0.2,
                       "lease_ttl_s": 2.0, "renew_interval_s": 0.5,
                       "circuit_breaker": {"failure_threshold": 3, "reset_after_s": 0.5}})
        return redis_blackhole, plan
    if name == "config":
        import yaml

        router = d.basic()
        doc = yaml.safe_load(router.config.read_text())
        other = json.loads(json.dumps(doc))
        other["routing"]["long_prompt_tokens"] = 1000
        other["limits"]["default_max_tokens"] = 200
        d.notes["_docs"] = [yaml.safe_dump(other), yaml.safe_dump(doc)]
        return config_rewrite, plan
    if name == "roll":
        d.basic()
        return roll, LoadPlan(**{**vars_of(plan), "max_tokens": (8, 150)})
    if name == "discovery":
        return _discovery(d), plan
    if name == "storm":
        d.basic()
        return storm, LoadPlan(**{**vars_of(plan), "clients": plan.clients + 2, "max_tokens": (20, 80),
                                  "prefill_close_fraction": 0.3, "stream_close_fraction": 0.3,
                                  "drop_at_stop": True})
    if name == "headers":
        d.basic()
        d.after = lambda: {"header_rejections": d.router.metric("specgate_header_limit_rejections_total")
                           if d.router else 0}
        return headers, plan
    if name == "clients":
        d.basic()
        return clients, plan
    if name == "bomb":
        d.basic(limits={"max_context_tokens": 4096, "default_max_tokens": 256, "max_request_bytes": 32 << 20})
        return bomb, plan
    if name in ("smaller", "reuse"):  # length alone decides between the pools
        d.basic(**{"routing.long_prompt_tokens": 4096})
        return {"smaller": smaller, "reuse": reuse}[name], plan
    d.basic()
    return {"kill": kill, "freeze": freeze}[name], plan


def _discovery(d: Drill) -> Callable[[Drill, asyncio.Event], Awaitable[None]]:
    from tests.support.fake_kube import FakeKubeAPI, endpoint_slice

    api = FakeKubeAPI().start()
    d.cleanups.append(api.close)
    port = free_port()
    for i in range(1, 4):
        d.engine(f"pod-{i}", True, host=f"127.0.0.{i + 1}", port=port)
    plain = d.engine("plain", False)
    selector = {"app.kubernetes.io/component": "pool-spec", "app.kubernetes.io/instance": "drill"}

    def make(pods: dict[int, bool]) -> dict[str, Any]:
        return endpoint_slice("sg-pool-spec-1", {**selector, "kubernetes.io/service-name": "sg-pool-spec"},
                              {f"127.0.0.{i + 1}": ready for i, ready in pods.items()}, port=port)

    api.apply(make({1: True, 2: True, 3: True}))
    kubeconfig = d.work / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": api.base_url}}],
        "users": [{"name": "fake", "user": {"token": "drill"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
    doc = _config(d.args.tokenizer, [], plain, spec_discovery={
        "namespace": "default", "label_selector": ",".join(f"{k}={v}" for k, v in selector.items()), "port": port})
    d.router = Router(d.procs, d.write_config(doc), env={"KUBECONFIG": str(kubeconfig)}).start()
    d.notes.update(_api=api, _slice=make)
    return churn


def vars_of(plan: LoadPlan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


async def run_drill(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    d = Drill(name, args, work)
    try:
        plan = LoadPlan(clients=args.clients, seed=args.seed)
        fault, plan = await asyncio.to_thread(setup, d, plan)
        return await d.run(fault, plan)
    finally:
        d.procs.close()
        for fn in d.cleanups:
            fn()


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| drill | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for r in rows:
        print(f"| {r['drill']} | " + " | ".join(f"{r[c]:g}" for c in COLUMNS) + " |")
    print()
    for r in rows:
        extra = {k: v for k, v in r.items() if k not in COLUMNS and k not in ("drill", "orphans_by_engine")}
        print(f"- {r['drill']}: {json.dumps(extra, sort_keys=True)}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_engine":
        return _engine(*sys.argv[2:5])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drills", default=",".join(DRILLS), help=f"comma-separated, among {','.join(DRILLS)}")
    ap.add_argument("--quick", action="store_true", help="6 s per drill, 3 clients (default 12 s, 4 clients)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of load per drill")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--freeze-s", type=float, default=None, help="SIGSTOP length of freeze and redis (s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default="runs/drills.json")
    args = ap.parse_args()
    args.duration = args.duration or (6.0 if args.quick else 12.0)
    args.clients = args.clients or (3 if args.quick else 4)
    args.freeze_s = args.freeze_s or (2.5 if args.quick else 4.0)
    names = [n for n in args.drills.split(",") if n]
    unknown = set(names) - set(DRILLS)
    if unknown:
        ap.error(f"unknown drills: {sorted(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="specgate-drills-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        from tests.support.tokenizer import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    args.tokenizer = tokenizer
    rows = []
    failed = []
    for name in names:
        try:
            row = asyncio.run(run_drill(name, args, work))
        except Exception as exc:  # noqa: BLE001 - one drill's broken stack must not hide the others
            print(f"{name}: the drill could not run: {type(exc).__name__}: {exc}", flush=True)
            failed.append(name)
            continue
        print(f"{name}: {json.dumps({c: row[c] for c in COLUMNS})}", flush=True)
        rows.append(row)
    print()
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": {**vars(args), "tokenizer": str(args.tokenizer)}, "drills": rows,
                               "could_not_run": failed},
                              indent=2, default=str))
    print(f"\nJSON written to {out} (logs in {work})")
    bad = sum(r["fabricated"] + r["leases_left"] + r["orphans"] + r["unaborted"] for r in rows)
    return 1 if bad or failed else 0


def _engine(host: str, port: str, config: str) -> int:
    """``drills.py _engine HOST PORT CONFIG_JSON``: serve one fake SGLang engine (the fake's own
    CLI does not expose ``on_disconnect``)."""
    import uvicorn

    from serving.fake_sglang import FakeConfig, create_fake_app

    uvicorn.run(create_fake_app(FakeConfig.from_dict(json.loads(config))), host=host, port=int(port),
                log_level="warning", access_log=False, lifespan="off", ws="none", timeout_graceful_shutdown=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
