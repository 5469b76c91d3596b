"""Endpoint health transitions and their log lines (router.state.endpoint.Endpoint)."""

from __future__ import annotations

import logging

from router.loops.scraper import EngineLoad
from router.state.endpoint import Endpoint

LOAD = EngineLoad(0, 0, 0.0, None, None)


def _records(caplog):
    out = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "specgate"]
    caplog.clear()
    return out


def test_health_changes_are_logged_once_each(caplog):
    caplog.set_level(logging.INFO, logger="specgate")
    ep = Endpoint("http://10.0.0.1:30000", "spec")
    ep.record_failure(slow=False, now=1.0, reason="Connection refused")
    ep.record_failure(slow=False, now=2.0, reason="Connection refused")
    assert (ep.state, _records(caplog)) == ("unknown", [])
    ep.record_failure(slow=False, now=3.0, reason="Connection refused")
    assert ep.state == "unhealthy"
    assert _records(caplog) == [("WARNING", ("endpoint http://10.0.0.1:30000 of pool spec is unhealthy "
                                            "(3 failed scrapes, last: Connection refused)"))]
    ep.record_failure(slow=False, now=4.0, reason="Connection refused")
    ep.record_success(LOAD, now=5.0)  # one success is not enough to come back (success_threshold 2)
    assert (ep.state, _records(caplog)) == ("unhealthy", [])
    ep.record_success(LOAD, now=6.0)
    assert ep.state == "healthy"
    assert _records(caplog) == [("INFO", ("endpoint http://10.0.0.1:30000 of pool spec is healthy "
                                         "(2 successful scrape(s))"))]
    ep.record_success(LOAD, now=7.0)
    assert _records(caplog) == []
    ep.mark_down()
    assert (ep.state, _records(caplog)) == ("unhealthy", [
        ("WARNING", ("endpoint http://10.0.0.1:30000 of pool spec is unhealthy "
                    "(a proxied request could not connect or its connection broke)"))])
    ep.mark_down()
    assert _records(caplog) == []


def test_first_successful_scrape_admits_and_logs(caplog):
    caplog.set_level(logging.INFO, logger="specgate")
    ep = Endpoint("http://p:1", "plain")
    ep.record_success(LOAD, now=1.0)
    assert (ep.state, _records(caplog)) == ("healthy", [
        ("INFO", "endpoint http://p:1 of pool plain is healthy (1 successful scrape(s))")])


def test_slow_last_healthy_endpoint_stays_and_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="specgate")
    ep = Endpoint("http://p:1", "plain")
    ep._siblings = [ep]
    ep.record_success(LOAD, now=1.0)
    caplog.clear()
    for t in range(5):
        ep.record_failure(slow=True, now=2.0 + t, reason="no answer within 1.0 s")
    assert (ep.state, _records(caplog)) == ("healthy", [])


# -- warm-up (router/loops/warmup.py): servable before routable ----------------------------------------

def _warm_runtime(tmp_path, **warmup):
    from router.config.tree import parse_config
    from router.state.runtime import Runtime
    from tests.support.config import router_config

    doc = router_config(tmp_path, "http://127.0.0.1:1", "http://127.0.0.1:2",
                        **{"health.warmup": {"enabled": True, "successes": 2, **warmup}})
    return Runtime(parse_config(doc), counter=None, warmup_gate=True)


def test_warmup_gates_static_endpoints_until_consecutive_probes_succeed(tmp_path):
    from router.loops.scraper import EngineLoad
    from router.state.endpoint import Endpoint

    rt = _warm_runtime(tmp_path)
    ep = rt.endpoint("http://127.0.0.1:1")
    assert ep.warmup_required and not ep.healthy and not ep.warming
    ep.record_success(EngineLoad(), now=0.0)
    assert ep.state == "healthy" and ep.warming and not ep.healthy and not rt.ready()
    ep.record_probe(True, "ok", 2)
    ep.record_probe(False, "HTTP 503", 2)  # a failure restarts the count
    assert (ep.warm_successes, ep.warm_detail, ep.healthy) == (0, "probe failed: HTTP 503", False)
    ep.record_probe(True, "ok", 2)
    ep.record_probe(True, "ok", 2)
    assert ep.healthy and ep.warm and not ep.warming and rt.ready()
    other = rt.endpoint("http://127.0.0.1:2")  # the plain pool's: not a sibling
    other.record_success(EngineLoad(), now=0.0)
    ep.record_stall("no first byte")
    assert ep.healthy  # the last routable endpoint of its pool stays (busy is not dead)
    sibling = Endpoint(url="http://127.0.0.1:3", pool=ep.pool, state="healthy", warmup_required=True, warm=True)
    ep._siblings.append(sibling)
    ep.record_stall("no first byte")
    assert not ep.healthy and ep.warm_detail == "waiting for a probe (no first byte)"
    ep.record_probe(True, "ok", 2)
    ep.record_probe(True, "ok", 2)
    ep.mark_down()  # ejected: a restarted engine warms up again
    assert not ep.warm and ep.warm_successes == 0
    ep.warm = True
    assert not ep.healthy  # unhealthy stays unroutable whatever the probes say


def test_warmup_gates_discovered_endpoints_and_is_off_when_disabled(tmp_path):
    from router.config.tree import parse_config
    from router.state.runtime import Runtime
    from tests.support.config import router_config

    rt = _warm_runtime(tmp_path)
    rt.set_discovered("spec", ["http://10.0.0.9:30000"])
    assert rt.endpoint("http://10.0.0.9:30000").warmup_required
    off = _warm_runtime(tmp_path, enabled=False)
    assert not any(e.warmup_required for e in off.all_endpoints())
    no_warmer = Runtime(parse_config(router_config(tmp_path, "http://127.0.0.1:1", "http://127.0.0.1:2",
                                                   **{"health.warmup": {"enabled": True}})), counter=None)
    assert not any(e.warmup_required for e in no_warmer.all_endpoints())  # nothing would probe them
    assert Runtime(no_warmer.config, None, rt).warmup_gate  # a reload keeps the app's gate


def test_a_request_that_ended_after_the_scrape_no_longer_counts_in_the_load():
    """A scrape counts what ran then; this router's requests that ended since come off it."""
    ep = Endpoint(url="http://e", pool="spec")
    before = [ep.lease() for _ in range(3)]  # dispatched, then the engine is scraped running them
    ep.record_success(EngineLoad(num_running_reqs=3, num_queue_reqs=1), now=1.0)
    assert ep.load(now=1.5, stale_after_s=5.0) == 4
    after = ep.lease()  # started after the scrape: not in its figure
    assert ep.load(now=1.5, stale_after_s=5.0) == 4  # max(3 + 1, 4 in flight)
    before[0].release()
    before[1].release()
    assert ep.load(now=1.6, stale_after_s=5.0) == 2  # 3 + 1 - 2 finished since, in flight 2
    after.release()  # not counted by the scrape: the scraped figure stays
    assert ep.load(now=1.7, stale_after_s=5.0) == 2
    before[2].release()
    assert ep.load(now=1.8, stale_after_s=5.0) == 1  # the queued one (another replica's, maybe)
    ep.record_success(EngineLoad(num_running_reqs=1), now=2.0)  # a new picture: nothing to take off
    assert ep.load(now=2.1, stale_after_s=5.0) == 1
