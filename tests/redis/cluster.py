"""Router replicas sharing one real ``redis-server`` (started here, on a free 127.0.0.1 port).

``redis-server`` comes from Debian's package (``bash scripts/ensure-redis.sh``); when it is
missing these tests fail, never skip. Each test gets its own server (``--save ''
--appendonly no``), stopped afterwards (after a SIGCONT, in case a test left it stopped).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, free_port, router_config, wait_until, write_router_yaml
from tests.support.stack import spec_fake_config

__all__ = ["CHAT", "COMPLETIONS", "PREFIX", "Cluster", "RedisCluster3", "RedisServer", "inflight_key", "state_section"]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PREFIX = "t"


class RedisServer:
    """A ``redis-server`` child process on 127.0.0.1 (no persistence)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server not found: run `bash scripts/ensure-redis.sh`")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--loglevel", "warning", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        try:
            wait_until(lambda: _pings(client), 10, f"redis-server to answer on port {self.port}", interval=0.02)
        finally:
            client.close()
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def pause(self) -> None:
        """SIGSTOP: a blackhole (connections accepted by the kernel, nothing answered)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def state_section(url: str, **kw: Any) -> dict[str, Any]:
    """The ``state`` section used by these tests (short TTL and breaker reset)."""
    doc: dict[str, Any] = {"backend": "redis", "redis_url": url, "key_prefix": PREFIX,
                           "op_timeout_s": 0.2, "lease_ttl_s": 2.0, "renew_interval_s": 0.5,
                           "circuit_breaker": {"failure_threshold": 3, "reset_after_s": 0.5}}
    doc.update(kw)
    return doc


def inflight_key(pool: str, url: str) -> str:
    return "{" + PREFIX + "}:inflight:" + pool + ":" + url


class Cluster:
    """Two fakes (spec, plain) with engine gauges pinned to 0 and N router replicas.

    The pinned gauges model SGLang's lagging ``num_running_reqs`` (refreshed every 40 decode
    steps), so the load the routers see is their in-flight accounting alone.
    """

    def __init__(self, tmp: Path, tokenizer: Path, redis_server: RedisServer | None, *, replicas: int = 2,
                 state: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                 **overrides: Any) -> None:
        self.tmp = tmp
        self.headers = headers or {}
        self.redis = redis_server
        self.spec = FakeServer(spec_fake_config(tokenizer)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        for fake in (self.spec, self.plain):
            r = httpx.post(fake.base_url + "/_fake/metrics",
                           json={"gauges": {"num_running_reqs": 0, "num_queue_reqs": 0}})
            assert r.status_code == 200, r.text
        if state is None and redis_server is not None:
            state = state_section(redis_server.url)
        if state is not None:
            overrides["state"] = state
        overrides.setdefault("upstream.idle_timeout_s", 120.0)   # held streams send nothing
        self.config_path = write_router_yaml(
            tmp / "router.yaml", router_config(tokenizer, self.spec.base_url, self.plain.base_url, **overrides))
        self.routers: list[RouterServer] = []
        self.clients: list[httpx.Client] = []
        self.streams: list[httpx.Response] = []
        for _ in range(replicas):
            self.add_replica()

    def add_replica(self) -> RouterServer:
        router = RouterServer(self.config_path).start()
        self.routers.append(router)
        self.clients.append(httpx.Client(base_url=router.base_url, timeout=30, headers=self.headers))
        return router

    def close(self) -> None:
        for s in self.streams:
            s.close()
        for c in self.clients:
            c.close()
        for r in self.routers:
            r.stop()
        self.spec.stop()
        self.plain.stop()

    # -- traffic ----------------------------------------------------------------------
    def hang_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests to the spec fake send the role and the first content
        event, then hang (the router commits a stream at its first content event)."""
        r = httpx.post(self.spec.base_url + "/_fake/script",
                       json=[{"path": CHAT, "fault": "hang", "after_chunks": 2, "count": n}])
        assert r.status_code == 200, r.text

    def open_stream(self, replica: int, headers: dict[str, str] | None = None) -> httpx.Response:
        """A streamed chat request held open (first event read); close it to release it."""
        self.hang_next()
        client = self.clients[replica]
        req = client.build_request("POST", CHAT, headers=headers, json={
            "model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 50, "stream": True})
        return self.hold(client.send(req, stream=True))

    def hold(self, resp: httpx.Response) -> httpx.Response:
        """Read the first event of a streamed response and keep it open (closed by ``close``)."""
        assert resp.status_code == 200, resp.read()
        events = resp.iter_raw()
        next(events)
        resp.extensions["held_events"] = events   # dropping the iterator would close the stream
        self.streams.append(resp)
        return resp

    # -- waits ----------------------------------------------------------------------------
    def syncs(self, replica: int) -> float:
        """Successful shared-state syncs of replica ``replica`` so far."""
        return self.routers[replica].metric("specgate_shared_state_ops_total", op="sync", result="ok")

    def wait_syncs(self, n: int = 3, replicas: list[int] | None = None, timeout: float = 10.0) -> None:
        """Wait until each replica (default: all) has applied ``n`` shared-state syncs whose batch
        was taken after this call.

        The counter counts a sync when its answer arrives, just before it is applied, and the
        one in flight at the call may have sent its batch before: so this waits for ``n + 2``.
        """
        for i in range(len(self.routers)) if replicas is None else replicas:
            target = self.syncs(i) + n + 2
            wait_until(lambda i=i, target=target: self.syncs(i) >= target, timeout, f"{n} syncs of replica {i}")

    def wait_quiet(self, timeout: float = 10.0) -> None:
        """Wait until no replica holds a request on either fake and every replica's view says so.

        A replica counts a request out after its client has the last byte, and another replica
        keeps the lease it last synced until its next sync: a request sent right after a
        response can otherwise see the finished one as load (and be kept off a "busier" pool).
        """
        urls = {"spec": self.spec.base_url, "plain": self.plain.base_url}
        replicas = range(len(self.routers))
        wait_until(lambda: all(self.local(i, u) == 0 for i in replicas for u in urls.values()),
                   timeout, "every replica to count its requests out")
        if self.redis is not None:
            wait_until(lambda: all(self.zcard(p, u) == 0 for p, u in urls.items()),
                       timeout, "the leases to leave Redis")
            self.wait_syncs(1, timeout=timeout)
        wait_until(lambda: all(self.view(i, u) == 0 for i in replicas for u in urls.values()),
                   timeout, "every replica's view to be empty")

    # -- views --------------------------------------------------------------------------
    def view(self, replica: int, url: str | None = None) -> int:
        """In-flight on an endpoint (default: spec) as replica ``replica`` would route on it."""
        st = self.routers[replica].state
        ep = st.runtime.endpoint(url or self.spec.base_url)
        return ep.inflight_view(st.clock(), st.runtime.config.scrape.stale_after_s)

    def local(self, replica: int, url: str | None = None) -> int:
        return self.routers[replica].state.runtime.endpoint(url or self.spec.base_url).inflight

    def zcard(self, pool: str = "spec", url: str | None = None) -> int:
        assert self.redis is not None
        client = self.redis.client()
        try:
            return int(client.zcard(inflight_key(pool, url or self.spec.base_url)))
        finally:
            client.close()

    def saturated(self, replica: int) -> bool:
        return next(p for p in self.routers[replica].state.runtime.pools if p.name == "spec").saturated

    def ready(self, replica: int) -> dict[str, Any]:
        r = self.clients[replica].get("/ready")
        assert r.status_code == 200, r.text
        return r.json()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too."""
    while True:
        port = free_port()
        if port + 10000 <= 65535 and _port_free(port + 10000):
            return port
        port = random.Random(port).randrange(20000, 55000)
        if _port_free(port) and _port_free(port + 10000):
            return port


class RedisCluster3:
    """Three ``redis-server --cluster-enabled yes`` masters on 127.0.0.1, slots split by
    ``redis-cli --cluster create`` (no replicas)."""

    def __init__(self, tmp: Path) -> None:
        if shutil.which("redis-cli") is None:
            pytest.fail("redis-cli not found: run `bash scripts/ensure-redis.sh`")
        self.nodes: list[RedisServer] = []
        self.procs = []
        self.ports = [_cluster_port() for _ in range(3)]
        for port in self.ports:
            work = tmp / f"node-{port}"
            work.mkdir()
            self.procs.append(subprocess.Popen(
                [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", str(work / "nodes.conf"),
                 "--dir", str(work), "--protected-mode", "no", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            wait_until(lambda port=port: self._pings(port), 10, f"cluster node {port}")
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        for port in self.ports:
            wait_until(lambda port=port: b"cluster_state:ok" in self.node(port).execute_command("CLUSTER", "INFO"),
                       20, f"cluster_state ok on {port}")
        self.slot = int(self.node(self.ports[0]).execute_command("CLUSTER", "KEYSLOT", "{" + PREFIX + "}"))

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def _pings(self, port: int) -> bool:
        try:
            return bool(self.node(port).ping())
        except redis.RedisError:
            return False

    def owner(self) -> int:
        """The port of the node that owns the deployment's slot."""
        for lo, hi, master, *_ in self.node(self.ports[0]).execute_command("CLUSTER", "SLOTS"):
            if lo <= self.slot <= hi:
                return int(master[1])
        raise AssertionError("slot not covered")

    def node_id(self, port: int) -> str:
        return self.node(port).execute_command("CLUSTER", "MYID").decode()

    def move_slot(self, dst: int) -> None:
        """Reshard the deployment's slot to node ``dst`` (IMPORTING/MIGRATING, MIGRATE, NODE)."""
        src = self.owner()
        s, d = self.node(src), self.node(dst)
        src_id, dst_id = self.node_id(src), self.node_id(dst)
        d.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", src_id)
        s.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", dst_id)
        while keys := s.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 100):
            s.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
        for port in self.ports:
            self.node(port).execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", dst_id)

    def other(self) -> int:
        return next(p for p in self.ports if p != self.owner())

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
