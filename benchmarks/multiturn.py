"""Multi-turn conversations through a pool of 2 replicas: how much prefill the routing saves.

    .venv/bin/python benchmarks/multiturn.py [--conversations 24] [--turns 8] [--concurrency 8]
        [--seed 0] [--seeds 1] [--cache-tokens 65536] [--out bench-multiturn.json]
    .venv/bin/python benchmarks/multiturn.py --topology spec2-plain1 [--accept-length 3] ...
    .venv/bin/python benchmarks/multiturn.py --engines sglang [--model models/tiny-llama] ...
    .venv/bin/python benchmarks/multiturn.py --upstream http://HOST:PORT http://HOST:PORT ...

Setup (all on 127.0.0.1, in one run): two replicas behind, in turn, every target below.
``--engines fake`` (default): two fake SGLang replicas (``serving/fake_sglang/`` with its
radix-like prefix cache, ``--prefix-cache-tokens``, reporting
``usage.prompt_tokens_details.cached_tokens`` as SGLang does with ``--enable-cache-report``).
``--engines sglang``: two real, plain SGLang CPU servers of ``--model`` started here
(``serving.local``: float32, ``--enable-cache-report``, ``--enable-metrics``, served as
``bench``, ``--max-total-tokens`` KV tokens each, radix cache on, page size 1), requests sent
greedy (``temperature: 0``) so every target sees the same answers. ``--upstream``: SGLang
servers already running with those flags. Targets:

- ``perfect``: no router, one engine that sees every turn: with fakes a third one with an
  unbounded cache; with SGLang the first replica alone (its radix cache: the previous prompt,
  the answer but its last token, as far as the next prompt's tokens agree, and never the
  prompt's last token, which SGLang always computes);
- ``specgate-least-load``: specgate with ``routing.prefix_cache.enabled: false`` (least load);
- ``specgate``: specgate with prefix-cache routing (``router/decision/prefix.py``);
- ``specgate-2-replicas``: two specgate processes with the same config, turns sent to them
  round robin (each sees half the traffic, no shared state);
- ``specgate-static`` and ``specgate-2-replicas-static``: the same two with
  ``routing.learning.enabled: false`` (the pool chosen by the thresholds, not predictions);
- ``rust-cache_aware`` and ``rust-round_robin``: SGLang's Rust router ``sglang-router==0.3.2``
  (installed from PyPI into ``.bench/rust-venv`` as ``benchmarks/router_overhead.py`` does; it
  needs nothing from the network once installed) with its default thresholds.

``--topology spec2-plain1`` (fakes only): three fake replicas in two pools instead, ``spec``
(two ``--speculative`` fakes, accept length ``--accept-length``) and ``plain`` (one), behind
specgate (the Rust router targets are skipped there: they know no pools); the pool a turn
went to is the ``x-specgate-pool`` header (``pool changes`` counts the turns whose pool
differs from the previous turn's).

Workload (seeded): ``--conversations`` conversations of ``--turns`` turns, ``--concurrency``
clients each playing whole conversations one after the other, pausing ``--think-s`` at most
before each later turn. Every conversation shares one system prompt (120 words); its first
user message has 40-80 seeded words, later ones 10-40; each answer asks ``--answer-tokens``
tokens. Defaults: fakes 24 x 8 turns, 8 clients, 16-48 tokens, no pause; SGLang 8 x 5, 4
clients, 8-16 tokens, pauses up to 2 s (without them, least load in a closed loop tends to send
a client's next turn to the replica its last turn just left, by accident). Between targets the
replicas' caches are flushed (and the fakes' logs reset). Specgate scrapes real engines every
0.5 s with a 5 s timeout (a busy CPU engine took over 1 s to answer ``/metrics``; three such
scrapes eject it, and its prefix index with it).

Measured per target: prefill work = sum over turns after the first of ``prompt_tokens -
cached_tokens`` (tokens, as the engines report them), divided by the same sum for ``perfect``;
requests per replica (the fakes' logs, or SGLang's ``sglang:num_requests_total``) and their
max/min ratio; wall time. Prints a table and writes JSON (every turn's record included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import ensure_rust_router, free_port, stop_processes, wait_http

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]


def conversations(n: int, turns: int, seed: int, answer: tuple[int, int] = (16, 48)) -> list[list[tuple[str, int]]]:
    """``n`` conversations of ``turns`` (user message, max_tokens) pairs, seeded; ``answer``:
    the inclusive range of max_tokens (tokens)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        conv = []
        for t in range(turns):
            words = rng.randint(40, 80) if t == 0 else rng.randint(10, 40)
            conv.append((" ".join(rng.choice(WORDS) for _ in range(words)), rng.randint(*answer)))
        out.append(conv)
    return out


SYSTEM = " ".join(random.Random(12345).choice(WORDS) for _ in range(120))


async def play_one(session: aiohttp.ClientSession, url: str | Callable[[], str], ci: int,
                   conv: list[tuple[str, int]], records: list[dict[str, Any]], t0: float,
                   extra: dict[str, Any] | None = None, think_s: float = 0.0) -> None:
    """Play conversation ``ci`` turn by turn (each turn after the previous answer), appending
    one record per turn to ``records`` (see :func:`play`); ``url``: the target, or a function
    giving the target of each turn; ``t0``: ``time.perf_counter()`` at the start of the run;
    ``think_s``: before each turn after the first the client waits a pause drawn uniformly in
    ``[0, think_s)`` s, the same for a given conversation and turn in every run.

    Raises:
        RuntimeError: a turn answered other than HTTP 200.
    """
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    for t, (text, max_tokens) in enumerate(conv):
        if t and think_s > 0:
            await asyncio.sleep(random.Random(f"{ci}:{t}").uniform(0, think_s))
        messages.append({"role": "user", "content": text})
        target = url if isinstance(url, str) else url()
        body = {"model": "bench", "messages": messages, "max_tokens": max_tokens, **(extra or {})}
        sent = time.perf_counter() - t0
        async with session.post(target + "/v1/chat/completions", json=body) as r:
            doc = await r.json(content_type=None)
            if r.status != 200:
                raise RuntimeError(f"{target}: HTTP {r.status}: {doc}")
            pool = r.headers.get("x-specgate-pool")
            request_id = r.headers.get("x-request-id")
        usage = doc["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
        records.append({"conversation": ci, "turn": t, "prompt_tokens": usage["prompt_tokens"],
                        "cached_tokens": cached, "pool": pool, "request_id": request_id, "sent": sent,
                        "t": time.perf_counter() - t0})
        messages.append({"role": "assistant", "content": doc["choices"][0]["message"]["content"] or ""})


async def play(urls: list[str], convs: list[list[tuple[str, int]]], concurrency: int,
               extra: dict[str, Any] | None = None, think_s: float = 0.0) -> list[dict[str, Any]]:
    """Run every conversation; each turn is sent to ``urls[i % len(urls)]`` (i: a global counter).

    ``concurrency`` clients each play whole conversations one after the other; ``extra``:
    fields added to every request body (e.g. ``{"temperature": 0}``); ``think_s``: see
    :func:`play_one`.

    Returns one record per turn: conversation, turn, prompt_tokens, cached_tokens, pool (the
    ``x-specgate-pool`` header, None without specgate), request_id (``x-request-id``: the
    router's access log line), sent and t (s since the start, when
    the turn was sent and answered).
    """
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(convs)):
        queue.put_nowait(i)
    counter = iter(range(10**9))
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            ci = queue.get_nowait()
            await play_one(session, lambda: urls[next(counter) % len(urls)], ci, convs[ci], records, t0, extra,
                           think_s)

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return records


def prefill_work(records: list[dict[str, Any]]) -> int:
    """Tokens prefilled over the turns after the first (prompt - cached)."""
    return sum(r["prompt_tokens"] - r["cached_tokens"] for r in records if r["turn"] > 0)


def pool_changes(records: list[dict[str, Any]]) -> int:
    """Turns whose ``pool`` (the ``x-specgate-pool`` header) differs from the previous turn's
    of the same conversation (count; 0 without specgate)."""
    last = {(r["conversation"], r["turn"]): r["pool"] for r in records}
    return sum(1 for (c, t), pool in last.items() if t > 0 and last.get((c, t - 1)) != pool)


def _post(url: str, timeout_s: float = 10.0) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b""), timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


class Engines:
    """The replicas behind every target: their URLs, how to reset them and count requests.

    ``kind`` ``fake``: ``serving/fake_sglang/`` (``/_fake/reset``, ``/_fake/requests``).
    ``sglang``: real SGLang servers (started here or ``--upstream``): reset is
    ``POST /flush_cache`` (retried until 200: SGLang refuses it while requests run), requests
    are the delta of the ``sglang:num_requests_total`` counter of ``/metrics`` (needs
    ``--enable-metrics``) since the last reset.
    """

    def __init__(self, kind: str, urls: list[str]) -> None:
        self.kind, self.urls = kind, urls
        self._base: dict[str, float] = {}

    def reset(self, url: str) -> None:
        if self.kind == "fake":
            _post(url + "/_fake/reset")
            _post(url + "/flush_cache")
            return
        deadline = time.monotonic() + 30
        while _post(url + "/flush_cache") != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}/flush_cache did not answer 200 within 30 s")
            time.sleep(0.2)
        self._base[url] = self._counter(url)

    def requests(self, url: str) -> int:
        import urllib.request

        if self.kind == "fake":
            with urllib.request.urlopen(url + "/_fake/requests") as r:
                doc = json.load(r)
            return sum(1 for e in doc["requests"] if e["path"] == "/v1/chat/completions")
        return round(self._counter(url) - self._base.get(url, 0.0))

    @staticmethod
    def _counter(url: str) -> float:
        import urllib.request

        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            return requests_total(r.read().decode())


def requests_total(metrics: str) -> float:
    """The sum of every ``sglang:num_requests_total`` (or ``sglang_``) series in a Prometheus
    text exposition (requests; 0 when absent)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(("sglang:num_requests_total", "sglang_num_requests_total")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_sglang_replicas(model: Path, n: int, max_total_tokens: int, work: Path) -> list[Any]:
    """Start ``n`` plain SGLang CPU servers of ``model`` (served as ``bench``, float32, seed 0,
    ``--enable-cache-report``, metrics on), concurrently; returns the
    :class:`serving.local.SGLangProcess` objects once every one answers ``/health``.

    Raises:
        serving.local.SGLangStartError: one did not start (the others are stopped).
    """
    from concurrent.futures import ThreadPoolExecutor

    from serving.local import SGLangProcess, cpu_env, cpu_launch_args

    servers = []
    for i in range(n):
        port = free_port()
        servers.append(SGLangProcess(
            cpu_launch_args(model, port=port, served_model_name="bench", max_total_tokens=max_total_tokens,
                            extra_args=["--enable-cache-report"]),
            port=port, env=cpu_env(), log_path=work / f"sglang-{i}.log"))
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(s.start, 600.0) for s in servers]
        errors = [f.exception() for f in futures]
    if any(errors):
        for s in servers:
            s.stop()
        raise next(e for e in errors if e is not None)
    return servers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", choices=("fake", "sglang"), default="fake",
                    help="fake: two serving/fake_sglang/ replicas; sglang: two real SGLang CPU replicas "
                         "of --model (started here unless --upstream)")
    ap.add_argument("--upstream", nargs="+", default=None, metavar="URL",
                    help="already-running SGLang replicas (served model `bench`, --enable-cache-report, "
                         "--enable-metrics); implies --engines sglang")
    ap.add_argument("--topology", choices=("one-pool", "spec2-plain1"), default="one-pool",
                    help="one-pool: the two replicas in one plain pool; spec2-plain1: two speculative fakes "
                         "and one plain fake in two pools (fakes only)")
    ap.add_argument("--accept-length", type=float, default=3.0,
                    help="the speculative fakes' accept length (tokens; --topology spec2-plain1)")
    ap.add_argument("--model", default=str(ROOT / "models" / "tiny-llama"), help="model of --engines sglang")
    ap.add_argument("--max-total-tokens", type=int, default=16384, help="KV pool per SGLang replica (tokens)")
    ap.add_argument("--conversations", type=int, default=None, help="default 24 (fake), 8 (sglang)")
    ap.add_argument("--turns", type=int, default=None, help="default 8 (fake), 5 (sglang)")
    ap.add_argument("--concurrency", type=int, default=None, help="default 8 (fake), 4 (sglang)")
    ap.add_argument("--answer-tokens", default=None, help="max_tokens range lo,hi: default 16,48 (fake), 8,16 (sglang)")
    ap.add_argument("--think-s", type=float, default=None,
                    help="pause before each later turn, uniform in [0, this) s: default 0 (fake), 2 (sglang)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="repeat with seeds seed..seed+seeds-1")
    ap.add_argument("--cache-tokens", type=int, default=65536, help="prefix cache per fake replica (tokens)")
    ap.add_argument("--decode-step-s", type=float, default=0.002)
    ap.add_argument("--prefill-s-per-token", type=float, default=2e-5)
    ap.add_argument("--targets", default=None,
                    help="default: perfect,specgate-least-load,specgate,specgate-2-replicas,rust-cache_aware,"
                         "rust-round_robin; with --topology spec2-plain1: perfect,specgate,specgate-static,"
                         "specgate-2-replicas,specgate-2-replicas-static")
    ap.add_argument("--hash-load-factor", type=float, default=None,
                    help="routing.prefix_cache.hash_load_factor for specgate (default: the config default)")
    ap.add_argument("--pool-affinity-ratio", type=float, default=None,
                    help="routing.prefix_cache.pool_affinity_ratio for specgate (default: the config default; "
                         "1: the predicted-fastest pool always)")
    ap.add_argument("--explore-every", type=int, default=None,
                    help="routing.learning.explore_every for specgate (default: the config default; 0: never)")
    ap.add_argument("--tokenizer", default=None, help="default: --model")
    ap.add_argument("--log-requests", action="store_true",
                    help="specgate's access log on (server.log_requests), in each router's log in the work folder")
    ap.add_argument("--out", default="bench-multiturn.json")
    args = ap.parse_args()
    real = args.engines == "sglang" or args.upstream is not None
    args.engines = "sglang" if real else "fake"
    dflt = (8, 5, 4, "8,16", 2.0) if real else (24, 8, 8, "16,48", 0.0)
    for key, value in zip(("conversations", "turns", "concurrency", "answer_tokens", "think_s"), dflt, strict=True):
        if getattr(args, key) is None:
            setattr(args, key, value)
    mixed = args.topology == "spec2-plain1"
    if mixed and real:
        raise SystemExit("--topology spec2-plain1 runs on fakes only")
    if args.targets is None:
        args.targets = ("perfect,specgate,specgate-static,specgate-2-replicas,specgate-2-replicas-static" if mixed
                        else "perfect,specgate-least-load,specgate,specgate-2-replicas,rust-cache_aware,"
                             "rust-round_robin")
    answer = tuple(int(x) for x in args.answer_tokens.split(","))
    assert len(answer) == 2
    targets = args.targets.split(",")
    work = Path(tempfile.mkdtemp(prefix="specgate-multiturn-"))
    print(f"logs in {work}", flush=True)
    tokenizer = Path(args.tokenizer or args.model)
    if not (tokenizer / "tokenizer.json").exists():
        if real:
            raise SystemExit(f"no tokenizer.json in {tokenizer} (build the model: python -m serving.tinymodel)")
        from tests.support import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []
    servers: list[Any] = []
    # greedy on real engines: every target sees the same answers (the fake's are deterministic)
    extra = {"temperature": 0} if real else None
    context = 8192 if real else 65536
    ready_s = 300.0 if real else 60.0  # routers start slowly beside busy CPU engines
    # a busy CPU engine can take over a second to answer /metrics: with the fakes' 1 s timeout
    # it was ejected (3 failed scrapes) and its prefix index dropped, which moved conversations
    scrape = ({"interval_s": 0.5, "timeout_s": 5.0, "stale_after_s": 5.0} if real else
              {"interval_s": 0.2, "timeout_s": 1.0, "stale_after_s": 1.0})

    def spawn(cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, stdout=open(work / log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                             start_new_session=True, cwd=ROOT)
        procs.append(p)
        return p

    def fake(cache_tokens: int, name: str, speculative: bool = False) -> str:
        port = free_port()
        spawn([sys.executable, "-m", "serving.fake_sglang", "--port", str(port), "--model-name", "bench",
               "--context-length", "65536", "--max-total-tokens", str(1 << 22),
               "--prefix-cache-tokens", str(cache_tokens), "--decode-step-s", str(args.decode_step_s),
               "--prefill-s-per-token", str(args.prefill_s_per_token),
               *(["--speculative", "--spec-accept-length", str(args.accept_length)] if speculative else [])],
              f"{name}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health")
        return url

    def specgate(fakes: list[str], enabled: bool, name: str, learning: bool = True) -> str:
        port = free_port()
        cfg = work / f"{name}.yaml"
        pools = ([{"name": "spec", "speculative": True, "endpoints": fakes[:2], "draft_reserved_tokens": 4},
                  {"name": "plain", "speculative": False, "endpoints": fakes[2:]}] if mixed else
                 [{"name": "plain", "speculative": False, "endpoints": fakes}])
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": context, "default_max_tokens": 64},
            "pools": pools,
            "routing": {"long_prompt_tokens": 16384 if mixed else 1024,
                        "saturation": {"enter": 100000, "exit": 99999},
                        "prefix_cache": {"enabled": enabled, **({"hash_load_factor": args.hash_load_factor}
                                                                if args.hash_load_factor else {}),
                                         **({"pool_affinity_ratio": args.pool_affinity_ratio}
                                            if args.pool_affinity_ratio else {})},
                        "learning": {"enabled": learning, **({"explore_every": args.explore_every}
                                                             if args.explore_every is not None else {})}},
            "scrape": scrape,
            "server": {"log_requests": args.log_requests}}))
        spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
              f"{name}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/ready", ready_s)
        return url

    def rust(fakes: list[str], policy: str) -> str:
        port = free_port()
        spawn([str(rust_py), "-m", "sglang_router.launch_router", "--worker-urls", *fakes, "--policy", policy,
               "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())],
              f"rust-{policy}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", ready_s)
        return url

    try:
        rust_py = ensure_rust_router() if any(t.startswith("rust") for t in targets) else None
        if args.upstream:
            replicas = list(args.upstream)
        elif real:
            t_start = time.perf_counter()
            servers = start_sglang_replicas(Path(args.model), 2, args.max_total_tokens, work)
            replicas = [s.base_url for s in servers]
            print(f"SGLang replicas {replicas} ready after {time.perf_counter() - t_start:.0f} s "
                  f"(logs in {work})", flush=True)
        elif mixed:  # spec, spec, plain: the first two make the speculative pool
            replicas = [fake(args.cache_tokens, "spec-a", True), fake(args.cache_tokens, "spec-b", True),
                        fake(args.cache_tokens, "plain-a")]
        else:
            replicas = [fake(args.cache_tokens, "fake-a"), fake(args.cache_tokens, "fake-b")]
        engines = Engines(args.engines, replicas)
        fronts: dict[str, list[str]] = {}
        if "perfect" in targets:
            # fake: a third replica with an unbounded cache; real: the first replica alone
            fronts["perfect"] = [replicas[0]] if real else [fake(1 << 30, "fake-perfect")]
        if "specgate-least-load" in targets:
            fronts["specgate-least-load"] = [specgate(replicas, False, "specgate-least-load")]
        if "specgate" in targets:
            fronts["specgate"] = [specgate(replicas, True, "specgate")]
        if "specgate-static" in targets:
            fronts["specgate-static"] = [specgate(replicas, True, "specgate-static", learning=False)]
        if "specgate-2-replicas" in targets:
            fronts["specgate-2-replicas"] = [specgate(replicas, True, "specgate-r1"),
                                             specgate(replicas, True, "specgate-r2")]
        if "specgate-2-replicas-static" in targets:
            fronts["specgate-2-replicas-static"] = [specgate(replicas, True, "specgate-static-r1", learning=False),
                                                    specgate(replicas, True, "specgate-static-r2", learning=False)]
        for policy in ("cache_aware", "round_robin"):
            if f"rust-{policy}" in targets and not mixed:
                fronts[f"rust-{policy}"] = [rust(replicas, policy)]
        time.sleep(1.0)  # a few scrape rounds: every specgate endpoint healthy
        results: dict[str, list[dict[str, Any]]] = {}
        for seed in range(args.seed, args.seed + args.seeds):
            convs = conversations(args.conversations, args.turns, seed, answer)
            for name, urls in fronts.items():
                backends = urls if name == "perfect" else replicas
                for b in backends:
                    engines.reset(b)
                t0 = time.perf_counter()
                records = asyncio.run(play(urls, convs, args.concurrency, extra, args.think_s))
                wall = time.perf_counter() - t0
                per = [engines.requests(b) for b in backends]
                res = {"seed": seed, "prefill_tokens": prefill_work(records), "requests_per_replica": per,
                       "wall_s": wall, "turns": len(records), "pool_changes": pool_changes(records),
                       "prompt_tokens": sum(r["prompt_tokens"] for r in records if r["turn"] > 0),
                       "records": records}
                results.setdefault(name, []).append(res)
                print(f"seed {seed} {name:26} prefill {res['prefill_tokens']:7d} tokens "
                      f"(of {res['prompt_tokens']})  requests {per}  pool changes {res['pool_changes']}  "
                      f"{wall:.1f} s", flush=True)
        summary = summarise(results)
        print_table(summary)
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results, "summary": summary}, indent=2))
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)
        for s in servers:
            s.stop()


def summarise(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    perfect = {r["seed"]: r["prefill_tokens"] for r in results.get("perfect", [])}
    rows = []
    for name, runs in results.items():
        ratios = [r["prefill_tokens"] / perfect[r["seed"]] for r in runs if perfect.get(r["seed"])]
        balance = [max(r["requests_per_replica"]) / max(min(r["requests_per_replica"]), 1) for r in runs]
        rows.append({"target": name, "prefill_vs_perfect": statistics.median(ratios) if ratios else None,
                     "prefill_vs_perfect_max": max(ratios) if ratios else None,
                     "requests_max_over_min": statistics.median(balance), "requests_per_replica":
                     runs[0]["requests_per_replica"], "wall_s": statistics.median(r["wall_s"] for r in runs),
                     "pool_changes": sum(r.get("pool_changes", 0) for r in runs),
                     "transitions": sum(r["turns"] - len({x["conversation"] for x in r["records"]}) for r in runs)})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'target':26} {'prefill/perfect':>15} {'worst seed':>10} {'req max/min':>11} {'requests (seed 0)':>18} "
          f"{'wall s':>7} {'pool changes':>14}")
    for r in rows:
        ratio = "-" if r["prefill_vs_perfect"] is None else f"{r['prefill_vs_perfect']:.2f}x"
        worst = "-" if r["prefill_vs_perfect_max"] is None else f"{r['prefill_vs_perfect_max']:.2f}x"
        print(f"{r['target']:26} {ratio:>15} {worst:>10} {r['requests_max_over_min']:11.2f} "
              f"{r['requests_per_replica']!s:>18} {r['wall_s']:7.1f} {r['pool_changes']:>6} / {r['transitions']:<6}")


if __name__ == "__main__":
    sys.exit(main())
