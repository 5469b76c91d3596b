"""Redis topologies with real ``redis-server`` processes: refused credentials (NOAUTH after a
password change) are counted by kind and shown in ``/ready``; a Redis Cluster URL naming a node
that does not own the deployment's slot (MOVED) is followed, with or without
``state.topology: cluster``, and so is a reshard of that slot under load."""

from __future__ import annotations

import concurrent.futures
import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from tests.redis.cluster import PREFIX, Cluster, state_section
from tests.support import free_port, wait_until

CHAT = "/v1/chat/completions"


def chat(i: int = 0) -> dict:
    return {"model": "tiny-llama", "max_tokens": 2, "messages": [{"role": "user", "content": f"hi {i}"}]}


def test_noauth_after_a_password_change_is_counted_and_shown(tmp_path, tokenizer_dir, redis_server):
    c = Cluster(tmp_path, tokenizer_dir, redis_server, replicas=1)
    admin = redis_server.client()
    try:
        c.wait_syncs(2)
        admin.config_set("requirepass", "rotated-pw")
        admin.execute_command("AUTH", "rotated-pw")
        admin.client_kill_filter(_type="normal", skipme=True)  # the router reconnects: NOAUTH
        router = c.routers[0]
        wait_until(lambda: router.metric("specgate_shared_state_ops_total", op="sync", result="auth_error") >= 1,
                   10, "an auth_error sync")
        wait_until(lambda: c.ready(0)["shared_state"]["status"] == "degraded", 10, "degraded")
        shared = c.ready(0)["shared_state"]
        assert shared["last_error"] == "auth_error: AuthenticationError", shared
        assert c.clients[0].post(CHAT, json=chat()).status_code == 200  # degraded, never unavailable
        assert router.metric("specgate_shared_state_ops_total", op="sync", result="error") == 0
        # the breaker paces the retries: no hot loop (threshold 3, reset 0.5 s)
        before = router.metric("specgate_shared_state_ops_total", op="sync", result="auth_error")
        wait_until(lambda: router.metric("specgate_shared_state_ops_total", op="sync",
                                         result="short_circuit") >= 3, 10, "short circuits")
        assert router.metric("specgate_shared_state_ops_total", op="sync", result="auth_error") - before <= 6
        admin.config_set("requirepass", "")
        wait_until(lambda: c.ready(0)["shared_state"]["status"] == "ok", 10, "recovery once the password is back")
    finally:
        admin.close()
        c.close()


@pytest.mark.parametrize("topology", ["standalone", "cluster"])
def test_a_cluster_node_that_does_not_own_the_slot_is_followed(tmp_path, tokenizer_dir, redis_cluster, topology):
    url = f"redis://127.0.0.1:{redis_cluster.other()}/0"
    c = Cluster(tmp_path, tokenizer_dir, None, replicas=2, state=state_section(url, topology=topology))
    try:
        c.wait_syncs(3)
        for i in range(2):
            shared = c.ready(i)["shared_state"]
            assert (shared["status"], shared["topology"]) == ("ok", "cluster"), shared
        held = c.open_stream(0)
        c.wait_syncs(3)
        assert c.view(1) == 1  # replica 1 sees replica 0's lease through the cluster
        owner = redis_cluster.node(redis_cluster.owner())
        assert owner.zcard("{" + PREFIX + "}:inflight:spec:" + c.spec.base_url) == 1
        held.close()
        c.wait_syncs(3)
        assert c.view(0) == c.view(1) == 0
        for router in c.routers:
            assert router.metric("specgate_shared_state_ops_total", op="sync", result="error") == 0
    finally:
        c.close()


def test_reshard_of_the_slot_under_load(tmp_path, tokenizer_dir, redis_cluster):
    url = f"redis://127.0.0.1:{redis_cluster.owner()}/0"
    c = Cluster(tmp_path, tokenizer_dir, None, replicas=2, state=state_section(url, topology="cluster"))
    try:
        c.wait_syncs(3)
        held = c.open_stream(0)
        c.wait_syncs(2)

        def load(n: int) -> list[int]:
            return [c.clients[i % 2].post(CHAT, json=chat(i)).status_code for i in range(n)]

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            statuses = pool.submit(load, 40)
            redis_cluster.move_slot(redis_cluster.other())
            assert statuses.result() == [200] * 40
        c.wait_syncs(3)
        assert all(c.ready(i)["shared_state"]["status"] == "ok" for i in range(2))
        assert c.view(1) == 1
        held.close()
        c.wait_syncs(3)
        assert c.view(0) == c.view(1) == 0
        new_owner = redis_cluster.node(redis_cluster.owner())
        assert new_owner.zcard("{" + PREFIX + "}:inflight:spec:" + c.spec.base_url) == 0
    finally:
        c.close()


class SentinelSet:
    """A primary, a replica and three sentinels (``redis-server --sentinel``) on 127.0.0.1,
    monitoring ``mymaster`` with quorum 2 and a 1 s down-after."""

    def __init__(self, tmp: Path) -> None:
        exe = shutil.which("redis-server")
        assert exe is not None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.primary, self.replica = free_port(), free_port()
        for port, extra in ((self.primary, []), (self.replica, ["--replicaof", "127.0.0.1", str(self.primary)])):
            self.procs.append(subprocess.Popen(  # --dir: a full resync writes an RDB file there
                [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--protected-mode", "no", "--loglevel", "warning", "--dir", str(tmp), *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.sentinels = [free_port() for _ in range(3)]
        for port in self.sentinels:
            conf = tmp / f"sentinel-{port}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {tmp}\n"
                            f"sentinel monitor mymaster 127.0.0.1 {self.primary} 2\n"
                            "sentinel down-after-milliseconds mymaster 1000\n"
                            "sentinel failover-timeout mymaster 5000\n")
            self.procs.append(subprocess.Popen([exe, str(conf), "--sentinel"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: self._role(self.replica) == b"slave" and self._linked(), 20, "replication up")
        wait_until(lambda: all(self._sees_replica(p) for p in self.sentinels), 20, "sentinels see the replica")

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)

    def _role(self, port: int) -> bytes | None:
        try:
            return self.client(port).execute_command("ROLE")[0]
        except redis.RedisError:
            return None

    def _linked(self) -> bool:
        return self.client(self.replica).info("replication").get("master_link_status") == "up"

    def _sees_replica(self, port: int) -> bool:
        try:
            return len(self.client(port).execute_command("SENTINEL", "REPLICAS", "mymaster")) == 1
        except redis.RedisError:
            return False

    @property
    def url(self) -> str:
        return "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinels) + "/0"

    def failover(self) -> None:
        self.client(self.sentinels[0]).execute_command("SENTINEL", "FAILOVER", "mymaster")
        wait_until(lambda: self._role(self.replica) == b"master" and self._role(self.primary) == b"slave", 30,
                   "the replica promoted and the old primary demoted")

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_sentinel_failover_is_followed(tmp_path, tokenizer_dir):
    sentinels = SentinelSet(tmp_path)
    c = Cluster(tmp_path, tokenizer_dir, None, replicas=2, state=state_section(sentinels.url, topology="sentinel"))
    try:
        c.wait_syncs(3)
        assert all(c.ready(i)["shared_state"]["status"] == "ok" for i in range(2))
        held = c.open_stream(0)
        c.wait_syncs(2)
        assert c.view(1) == 1

        def load(n: int) -> list[int]:
            return [c.clients[i % 2].post(CHAT, json=chat(i)).status_code for i in range(n)]

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            statuses = pool.submit(load, 30)
            sentinels.failover()  # the old primary stays up, as a replica: READONLY for old connections
            assert statuses.result() == [200] * 30
        c.wait_syncs(3, timeout=20)
        assert all(c.ready(i)["shared_state"]["status"] == "ok" for i in range(2))
        # The lease lives on the new primary. A write the old primary took after the promotion
        # is lost with its resync (split brain); the next renewal re-adds every open lease
        # (state.renew_interval_s: 0.5 s here), so the count heals within that.
        new_primary = sentinels.client(sentinels.replica)
        key = "{" + PREFIX + "}:inflight:spec:" + c.spec.base_url
        wait_until(lambda: c.view(1) == 1 and new_primary.zcard(key) == 1, 5, "the lease on the new primary")
        held.close()
        c.wait_syncs(3)
        assert c.view(0) == c.view(1) == 0
        assert new_primary.zcard(key) == 0
    finally:
        c.close()
        sentinels.close()
