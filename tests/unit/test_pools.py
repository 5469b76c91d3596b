"""Endpoint health transitions and their log lines (router.endpoint.Endpoint)."""

from __future__ import annotations

import logging

from router.endpoint import Endpoint
from router.scraper import EngineLoad

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
