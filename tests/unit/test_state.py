"""Shared state, auth and overrides without a network: breaker, ledger, keys, config.

The ledger tests run :class:`router.shared.state.RedisState` against a Python model of its Lua script
(same semantics: ZADD with server-time expiry, ZREM, purge, ZCARD, CAS flags), with failures
injected, including timed-out batches that run *late* (as a SIGSTOPped Redis does on SIGCONT).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
import redis

from router.access.auth import Auth, KeyRing, bearer_token, load_auth
from router.cli import main
from router.config.tree import (
    AuthConfig,
    ConfigError,
    Overrides,
    StateConfig,
    parse_config,
    parse_overrides,
)
from router.errors import AuthenticationError, PermissionDenied
from router.ops.metrics import RouterMetrics
from router.shared.state import (
    CircuitBreaker,
    MemoryState,
    RedisState,
    build_shared_state,
    redis_keys,
)
from router.state.runtime import Runtime
from tests.support.config_docs import BASE, with_

# -- circuit breaker ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_after_k_failures_probes_once_and_closes():
    clock = Clock()
    b = CircuitBreaker(3, 1.0, clock)
    for _ in range(2):
        assert b.allow()
        b.failure()
    assert b.state == "closed" and b.allow()
    b.failure()
    assert (b.state, b.allow()) == ("open", False)
    clock.t += 0.99
    assert not b.allow()
    clock.t += 0.01
    assert b.allow() and b.state == "half_open"
    assert not b.allow()          # one probe at a time
    b.failure()                   # the probe failed: open again for reset_after_s
    assert (b.state, b.allow()) == ("open", False)
    clock.t += 1.0
    assert b.allow()
    b.success()
    assert (b.state, b.failures, b.allow()) == ("closed", 0, True)
    b.failure()
    b.success()
    b.failure()
    b.failure()
    assert b.state == "closed"    # failures must be consecutive


# -- config -------------------------------------------------------------------------------


def test_state_and_auth_defaults():
    cfg = parse_config(BASE)
    assert cfg.state == StateConfig()
    assert (cfg.state.backend, cfg.state.op_timeout_s, cfg.state.lease_ttl_s, cfg.state.renew_interval_s) == (
        "memory", 0.05, 15.0, 5.0)
    assert (cfg.state.circuit_breaker.failure_threshold, cfg.state.circuit_breaker.reset_after_s) == (3, 1.0)
    assert cfg.auth == AuthConfig() and not cfg.auth.client_auth


@pytest.mark.parametrize("path,value,needle", [
    ("state", {"backend": "etcd"}, "state.backend"),
    ("state", {"lease_ttl_s": 4, "renew_interval_s": 3}, "renew_interval_s must be <= lease_ttl_s / 2"),
    ("state", {"op_timeout_s": 6}, "op_timeout_s must be < renew_interval_s"),
    ("state", {"redis_url": "http://x:6379"}, "state.redis_url"),
    ("state", {"key_prefix": "a b"}, "state.key_prefix"),
    ("state", {"redis_url_env": "1BAD"}, "state.redis_url_env"),
    ("state", {"circuit_breaker": {"failure_threshold": 0}}, "state.circuit_breaker.failure_threshold"),
    ("state", {"circuit_breaker": {"reset": 1}}, "state.circuit_breaker.reset"),
    ("state", {"ttl": 1}, "state.ttl"),
    ("auth", {"api_keys": ["a b"]}, "no whitespace"),
    ("auth", {"api_keys": [""]}, "non-empty"),
    ("auth", {"api_keys": ["k1"], "admin_api_key": "k1"}, "must not also be a client key"),
    ("auth", {"admin_key": "x"}, "auth.admin_key"),
    ("auth", {"api_keys": "k1"}, "auth.api_keys"),
])
def test_state_and_auth_are_strict(path, value, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_(path, value))
    assert needle in str(exc.value)
    assert "k1" not in str(exc.value)   # inputs are never echoed (secrets)


def test_config_check_masks_keys(tmp_path, capsys):
    import yaml

    doc = with_("auth", {"api_keys": ["sk-inline-secret-1"], "admin_api_key": "adm-inline-secret-2"})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["config", "check", "--no-paths", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sk-inline-secret-1" not in out and "adm-inline-secret-2" not in out
    assert json.loads(out)["auth"]["api_keys"] == ["**********"]


def test_auth_files_resolve_against_the_config_dir(tmp_path):
    cfg = parse_config(with_("auth", {"api_keys_file": "secrets/keys"}), base_dir=tmp_path)
    assert cfg.auth.api_keys_file == str((tmp_path / "secrets/keys").resolve())


# -- overrides ----------------------------------------------------------------------------


def test_overrides_merge_and_validate_like_the_yaml():
    routing = parse_config(BASE).routing   # long 1024, enter 8, exit 6
    ov = parse_overrides({"routing": {"long_prompt_tokens": 512, "saturation": {"enter": 16}}})
    assert ov.flat() == {"routing.long_prompt_tokens": 512, "routing.saturation.enter": 16}
    merged = ov.apply(routing)
    assert (merged.long_prompt_tokens, merged.saturation.enter, merged.saturation.exit) == (512, 16, 6)
    assert merged.acceptance == routing.acceptance and merged.seed == routing.seed
    assert Overrides().apply(routing) is routing and Overrides().flat() == {}
    with pytest.raises(ConfigError, match=r"routing\.saturation: .*exit \(6\) must be < saturation.enter \(5\)"):
        parse_overrides({"routing": {"saturation": {"enter": 5}}}).apply(routing)
    for bad, where in [({"routing": {"long_prompt_tokens": 0}}, "routing.long_prompt_tokens"),
                       ({"routing": {"long_prompt_tokens": 5.0}}, "routing.long_prompt_tokens"),
                       ({"routing": {"long_prompt_tokens": True}}, "routing.long_prompt_tokens"),
                       ({"routing": {"saturation": {"exit": -1}}}, "routing.saturation.exit"),
                       ({"routing": {"acceptance": {}}}, "routing.acceptance"),
                       ({"limits": {}}, "limits")]:
        with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
            parse_overrides(bad)
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_overrides([1])


def test_runtime_keeps_overrides_over_a_reload_and_reports_invalid_ones():
    cfg = parse_config(BASE)
    rt = Runtime(cfg, counter=None)
    rt.set_overrides(parse_overrides({"routing": {"saturation": {"exit": 7}}}))
    assert (rt.routing.saturation.enter, rt.routing.saturation.exit, rt.override_error) == (8, 7, None)
    # the new YAML lowers enter to 7: exit 7 no longer fits; the YAML applies, the error is shown
    new = parse_config(with_("routing.saturation", {"enter": 7, "exit": 2}))
    rt2 = Runtime(new, counter=None, previous=rt)
    assert rt2.overrides == rt.overrides
    assert (rt2.routing.saturation.enter, rt2.routing.saturation.exit) == (7, 2)
    assert "must be < saturation.enter" in rt2.override_error


# -- auth ---------------------------------------------------------------------------------


def test_keys_from_inline_file_and_env(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\n  ck-file-1  \nck-file-2\n")
    admin = tmp_path / "admin"
    admin.write_text("adm-file\n")
    cfg = AuthConfig(api_keys=["ck-inline"], api_keys_file=str(keys), api_keys_env="CK",
                     admin_api_key_file=str(admin))
    auth = load_auth(cfg, {"CK": "ck-env-1, ck-env-2\nck-env-3"})
    assert len(auth.client) == 6 and len(auth.admin) == 1
    for key in ["ck-inline", "ck-file-1", "ck-file-2", "ck-env-1", "ck-env-2", "ck-env-3"]:
        auth.check_client(f"Bearer {key}")
        with pytest.raises(PermissionDenied):
            auth.check_admin(f"Bearer {key}")
    auth.check_admin("bearer adm-file")
    assert "ck-" not in repr(auth.client)
    with pytest.raises(ConfigError, match="cannot read api_keys_file"):
        load_auth(AuthConfig(api_keys_file=str(tmp_path / "missing")), {})
    with pytest.raises(ConfigError, match="environment variable CK is not set"):
        load_auth(AuthConfig(api_keys_env="CK"), {})
    with pytest.raises(ConfigError, match="hold no key"):
        load_auth(AuthConfig(api_keys_env="CK"), {"CK": " , "})
    with pytest.raises(ConfigError, match="admin key is also a client key"):
        load_auth(AuthConfig(api_keys=["same"], admin_api_key_env="ADM"), {"ADM": "same"})
    with pytest.raises(ConfigError, match="holds whitespace"):
        load_auth(AuthConfig(api_keys_env="CK"), {"CK": "a b"})


def test_auth_checks():
    open_ = Auth(None, None)
    open_.check_client(None)
    with pytest.raises(PermissionDenied, match="admin API is disabled"):
        open_.check_admin(f"Bearer {'x'}")
    auth = Auth(KeyRing(["ck-1"]), KeyRing(["adm-1"]))
    for header in [None, "", "Bearer", "Bearer   ", "Basic ck-1", "ck-1", "Bearer ck-2", "Bearer ck-1x"]:
        with pytest.raises(AuthenticationError) as exc:
            auth.check_client(header)
        assert exc.value.status == 401 and exc.value.code == "invalid_api_key"
        assert "ck-" not in exc.value.message
    auth.check_client("Bearer ck-1")
    auth.check_client("  bearer   ck-1 ")
    with pytest.raises(AuthenticationError):
        auth.check_admin("Bearer nope")
    with pytest.raises(PermissionDenied) as exc:
        auth.check_admin("Bearer ck-1")
    assert exc.value.status == 403 and exc.value.code == "permission_denied"
    assert bearer_token("Bearer a") == "a" and bearer_token("Token a") is None


# -- shared state backends --------------------------------------------------------------


def test_build_shared_state_needs_a_url():
    from prometheus_client import CollectorRegistry

    metrics = RouterMetrics(CollectorRegistry())
    assert isinstance(build_shared_state(StateConfig(), metrics=metrics), MemoryState)
    with pytest.raises(ConfigError, match=r"\$SPECGATE_REDIS_URL is set"):
        build_shared_state(StateConfig(backend="redis"), metrics=metrics, environ={})
    with pytest.raises(ConfigError, match="not a redis://"):
        build_shared_state(StateConfig(backend="redis"), metrics=metrics, environ={"SPECGATE_REDIS_URL": "x"})
    st = build_shared_state(StateConfig(backend="redis"), metrics=metrics,
                            environ={"SPECGATE_REDIS_URL": "redis://u:pw@db:6380/2"})
    assert isinstance(st, RedisState)
    assert st.target == "redis://db:6380/2" and "pw" not in json.dumps(st.status())
    assert st.status()["status"] == "degraded"   # never reached Redis yet
    assert redis_keys("p") == {"bypass": "{p}:bypass", "overrides": "{p}:overrides", "inflight": "{p}:inflight:"}


class ScriptModel:
    """The sync Lua script's semantics, in Python, on dicts (time in ms, set by the test)."""

    def __init__(self) -> None:
        self.z: dict[str, dict[str, int]] = {}
        self.h: dict[str, dict[str, str]] = {}
        self.kv: dict[str, bytes] = {}
        self.now = 0

    def run(self, keys: list[str], args: list[Any]) -> list[Any]:
        now, ttl, i, counts = self.now, int(args[0]), 1, []
        for key in keys[2:]:
            z = self.z.setdefault(key, {})
            n = int(args[i]); i += 1
            for m in args[i:i + n]:
                z[m] = now + ttl
            i += n
            n = int(args[i]); i += 1
            for m in args[i:i + n]:
                z.pop(m, None)
            i += n
            for m in [m for m, s in z.items() if s <= now]:
                del z[m]
            counts.append(len(z))
        h = self.h.setdefault(keys[0], {})
        n = int(args[i]); i += 1
        for _ in range(n):
            f, expected, new = args[i:i + 3]; i += 3
            cur = h.get(f)
            if (cur is None and expected == "") or cur == expected:
                h[f] = new
        flat = [x.encode() for kv in h.items() for x in kv]
        return [counts, flat, self.kv.get(keys[1]), now]


class FakeClient:
    """Stands in for redis.asyncio.Redis: 'ok', 'refused', or 'blackhole' (the call times out
    but the command is kept and runs later, at :meth:`resume`)."""

    def __init__(self, model: ScriptModel) -> None:
        self.model = model
        self.mode = "ok"
        self.late: list[tuple[list[str], list[Any]]] = []
        self.defer = False

    def register_script(self, lua: str) -> Any:
        async def script(keys: list[str], args: list[Any]) -> Any:
            if self.mode == "refused":
                raise redis.ConnectionError("refused")
            if self.mode == "blackhole":
                self.late.append((list(keys), list(args)))
                raise TimeoutError
            reply = self.model.run(list(keys), list(args))
            if self.defer:      # the stale commands ran just after our first one
                self._run_late()
            return reply
        return script

    def _run_late(self) -> None:
        for keys, args in self.late:
            self.model.run(keys, args)
        self.late.clear()
        self.defer = False

    def resume(self, defer: bool = False) -> None:
        """SIGCONT: the buffered (timed-out) commands run now, or after the next new one."""
        self.mode = "ok"
        if defer:
            self.defer = bool(self.late)
        else:
            self._run_late()

    async def aclose(self) -> None:
        pass


def _setup(seed_clock: Clock, ttl: float = 2.0, renew: float = 0.5,
           ) -> tuple[RedisState, Runtime, FakeClient, ScriptModel]:
    from prometheus_client import CollectorRegistry

    from router.state.fleet import Fleet

    cfg = parse_config(BASE)
    model = ScriptModel()
    client = FakeClient(model)
    scfg = StateConfig(backend="redis", lease_ttl_s=ttl, renew_interval_s=renew, op_timeout_s=0.05,
                       circuit_breaker={"failure_threshold": 3, "reset_after_s": 0.5})
    st = RedisState(scfg, "redis://x", metrics=RouterMetrics(CollectorRegistry()), clock=seed_clock,
                    client=client)
    rt = Runtime(cfg, counter=None, ledger=st)
    fleet = Fleet(cfg, {cfg.model.name: rt})
    st._get_fleet = lambda: fleet
    return st, rt, client, model


def test_ledger_counts_exactly_without_io_on_the_lease_path():
    clock = Clock()
    st, rt, _client, model = _setup(clock)
    ep = rt.endpoint("http://127.0.0.1:30001")
    key = "{specgate}:inflight:spec:http://127.0.0.1:30001"
    asyncio.run(st._batch_once())
    assert not st.degraded and ep.shared_inflight == 0
    leases = [ep.lease() for _ in range(3)]
    assert model.z.get(key, {}) == {}            # nothing sent on the request path
    assert ep.inflight_view(clock(), 1.0) == 3
    asyncio.run(st._batch_once())
    assert set(model.z[key]) == {le.lease_id for le in leases}
    model.z[key]["other-replica:1"] = 10**12    # another replica's lease
    asyncio.run(st._batch_once())
    assert (ep.shared_inflight, ep.shared_base, ep.inflight_view(clock(), 1.0)) == (4, 3, 4)
    leases[0].release()
    leases[0].release()                          # idempotent: one ZREM, one decrement
    assert ep.inflight == 2 and ep.inflight_view(clock(), 1.0) == 3
    asyncio.run(st._batch_once())
    assert len(model.z[key]) == 3 and ep.inflight_view(clock(), 1.0) == 3
    clock.t += 1.1                               # the shared view goes stale: local only
    assert ep.inflight_view(clock(), 1.0) == 2
    # a lease taken and released between two batches never reaches Redis
    short = ep.lease()
    short.release()
    assert st._adds == {key: {}} and not st._rems


def test_ledger_degrades_recovers_and_expires_a_crashed_replica():
    clock = Clock()
    st, rt, client, model = _setup(clock)
    ep = rt.endpoint("http://127.0.0.1:30001")
    key = "{specgate}:inflight:spec:http://127.0.0.1:30001"
    asyncio.run(st._batch_once())
    a, b = ep.lease(), ep.lease()
    asyncio.run(st._batch_once())
    client.mode = "blackhole"
    for _ in range(3):
        asyncio.run(st._batch_once())
    assert st.degraded and st.status()["breaker"] == "open" and ep.shared_inflight is None
    a.release()                                 # released while Redis is away
    c = ep.lease()                              # taken while Redis is away
    asyncio.run(st._batch_once())               # short-circuited: no call made
    assert len(client.late) == 3
    clock.t += 0.6
    client.resume()                             # the 3 timed-out batches run now: they re-add a
    assert a.lease_id in model.z[key]
    asyncio.run(st._batch_once())               # the half-open probe reconciles
    assert not st.degraded
    assert set(model.z[key]) == {b.lease_id, c.lease_id}
    assert ep.inflight_view(clock(), 1.0) == 2
    # a crashed replica: its members are never renewed, they expire after the TTL
    model.now = 1_000
    model.z[key]["dead-replica:7"] = model.now + 2_000
    asyncio.run(st._batch_once())
    assert ep.inflight_view(clock(), 1.0) == 3
    model.now += 2_001
    clock.t += 0.6                              # renewal due: our two are re-added with fresh expiry
    asyncio.run(st._batch_once())
    assert set(model.z[key]) == {b.lease_id, c.lease_id} and ep.inflight_view(clock(), 1.0) == 2


@pytest.mark.parametrize("seed", range(12))
def test_ledger_reconciles_exactly_under_random_outages(seed):
    """Seeded random lease traffic, batches, refusals and blackholes whose timed-out commands
    run late, before or just after the recovery batch. Renewal is off (TTL 1000 s), so only
    the reconciliation makes the counts exact."""
    rng = random.Random(seed)
    clock = Clock()
    st, rt, client, model = _setup(clock, ttl=1000.0, renew=500.0)
    eps = [rt.endpoint("http://127.0.0.1:30001"), rt.endpoint("http://127.0.0.1:30002")]
    keys = [f"{{specgate}}:inflight:{ep.pool}:{ep.url}" for ep in eps]
    open_: list[Any] = []
    for _ in range(400):
        op = rng.random()
        if op < 0.3:
            open_.append(rng.choice(eps).lease())
        elif op < 0.55 and open_:
            lease = open_.pop(rng.randrange(len(open_)))
            lease.release()
            if rng.random() < 0.3:
                lease.release()     # a second release is a no-op
        elif op < 0.85:
            asyncio.run(st._batch_once())
        elif op < 0.9 and client.mode == "ok":
            client.mode = rng.choice(["refused", "blackhole"])
        elif op < 0.95 and client.mode != "ok":
            client.resume(defer=rng.random() < 0.5)   # SIGCONT
        dt = rng.choice([0.0, 0.05, 0.2])
        clock.t += dt
        model.now += int(dt * 1000)
        assert all(ep.inflight >= 0 for ep in eps)
        assert all(ep.inflight_view(clock(), 1.0) >= 0 for ep in eps)
    client.resume(defer=rng.random() < 0.5)
    for _ in range(2):      # the recovery batch, then one that re-sends the tombstones
        clock.t += 0.6
        model.now += 600
        asyncio.run(st._batch_once())
    assert not st.degraded
    for ep, key in zip(eps, keys):
        want = {le.lease_id for le in open_ if le.endpoint is ep}
        assert set(model.z.get(key, {})) == want
        assert ep.inflight == len(want) == ep.inflight_view(clock(), 1.0)
    for lease in open_:
        lease.release()
    clock.t += 0.1
    asyncio.run(st._batch_once())
    assert all(not model.z.get(key) for key in keys)
    assert all(ep.inflight == 0 == ep.inflight_view(clock(), 1.0) for ep in eps)


def test_shared_bypass_follows_the_shared_flag_with_hysteresis():
    doc = with_("routing.acceptance", {"enabled": False})   # enter 8, exit 6
    doc["routing"]["min_flip_interval_s"] = 0
    cfg = parse_config(doc)
    rt = Runtime(cfg, counter=None)
    ep = rt.endpoint("http://127.0.0.1:30001")
    ep.state = "healthy"
    pool = rt.pools[0]
    ep.shared_inflight, ep.shared_base, ep.shared_at = 7, 0, 0.0
    low = {"spec:low_acceptance:greedy": False, "spec:low_acceptance:sampled": False}
    # between exit and enter: the shared flag decides, both ways
    assert rt.sync_bypass({"spec:saturated": True, **low}, 0.0) == []
    assert pool.saturated is True
    assert rt.sync_bypass({"spec:saturated": False, **low}, 0.0) == []
    assert pool.saturated is False
    ep.shared_inflight = 8
    assert rt.sync_bypass({"spec:saturated": False, **low}, 0.0) == [("spec:saturated", False, True)]
    ep.shared_inflight = 5
    assert rt.sync_bypass({"spec:saturated": True, **low}, 0.0) == [("spec:saturated", True, False)]
    # no shared flags yet: continue from the local ones and publish them
    pool.bypass.flags["saturated"] = True
    ep.shared_inflight = 7
    assert rt.sync_bypass({}, 0.0) == [("spec:saturated", None, True), ("spec:low_acceptance:greedy", None, False),
                                       ("spec:low_acceptance:sampled", None, False)]


def test_memory_state_is_inert(tmp_path: Path):
    m = MemoryState()
    asyncio.run(m.start(lambda: None))
    asyncio.run(m.store_overrides(Overrides()))
    asyncio.run(m.stop())
    assert (m.degraded, m.ledger, m.status()) == (False, None, {"backend": "memory", "status": "ok"})


def test_shared_overrides_apply_and_invalid_ones_are_ignored(caplog):
    clock = Clock()
    st, rt, _client, model = _setup(clock)
    key = "{specgate}:overrides"
    model.kv[key] = b'{"routing": {"long_prompt_tokens": 77}}'
    asyncio.run(st._batch_once())
    assert rt.routing.long_prompt_tokens == 77 and rt.overrides.flat() == {"routing.long_prompt_tokens": 77}
    model.kv[key] = b'{"routing": {"long_prompt_tokens": "x"}}'
    with caplog.at_level("ERROR", logger="specgate.state"):
        for _ in range(3):
            asyncio.run(st._batch_once())
    assert rt.routing.long_prompt_tokens == 77       # the last good overrides stay
    assert sum("ignoring invalid shared overrides" in r.getMessage() for r in caplog.records) == 1
    del model.kv[key]
    asyncio.run(st._batch_once())
    assert rt.routing.long_prompt_tokens == 1024 and rt.overrides == Overrides()


def test_runtime_flip_points_follow_the_rules_an_override_sets():
    from router.decision.policy import flip_points

    rt = Runtime(parse_config(BASE), counter=None)
    assert rt.flip_points(8, 1) == tuple(flip_points(8, 1, rt.pools, rt.rules))
    assert rt.flip_points(None, 2) == tuple(flip_points(None, 2, rt.pools, rt.rules))
    assert rt.flip_points(8, 1) is rt.flip_points(8, 1)  # computed once
    rt.set_overrides(parse_overrides({"routing": {"long_prompt_tokens": 77}}))
    assert 77 in rt.flip_points(8, 1)
    assert rt.flip_points(8, 1) == tuple(flip_points(8, 1, rt.pools, rt.rules))
