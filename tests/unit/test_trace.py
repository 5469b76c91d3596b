"""W3C Trace Context validation (router.ops.trace): what reaches the engine."""

from __future__ import annotations

import pytest

from router.ops.trace import trace_headers, valid_traceparent, valid_tracestate

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("value", [
    TP, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", f" {TP}\t",
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",          # a higher version
    "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like",
])
def test_valid_traceparents_are_kept(value):
    assert valid_traceparent([value]) == value.strip()


@pytest.mark.parametrize("value", [
    "zz-" + "g" * 297,                                                     # junk, 300 characters
    TP.upper(), TP[:-1], TP + "0", TP + "-x",                              # case, lengths, extra
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",            # version ff
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",            # zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",            # zero parent id
    "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "",
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",           # a higher version, no dash
])
def test_malformed_traceparents_are_dropped(value):
    assert valid_traceparent([value]) is None


def test_two_traceparent_headers_are_malformed():
    assert valid_traceparent([TP, TP]) is None and valid_traceparent([]) is None


@pytest.mark.parametrize(("values", "expect"), [
    (["vendora=x,vendorb=y"], "vendora=x,vendorb=y"),
    (["vendora=x", "vendorb=y"], "vendora=x,vendorb=y"),                   # two headers joined
    (["congo=t61rcWkgMzE, rojo=00f067aa0ba902b7,,"], "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7,,"),
    (["t3n@sys=a b", "a*/_-1=~"], "t3n@sys=a b,a*/_-1=~"),
    ([",".join(f"k{i}=v" for i in range(32))], ",".join(f"k{i}=v" for i in range(32))),
    (["=" * 600], None), (["a=1,a=2"], None), (["Upper=1"], None), (["a=1=2"], None), (["a= "], None),
    (["a=" + "x" * 257], None), ([",".join(f"k{i}=v" for i in range(33))], None), ([","], None), ([], None),
])
def test_tracestate(values, expect):
    assert valid_tracestate(values) == expect


def test_tracestate_needs_a_valid_traceparent():
    assert trace_headers([TP], ["a=1"]) == {"traceparent": TP, "tracestate": "a=1"}
    assert trace_headers([TP], ["=bad"]) == {"traceparent": TP}
    assert trace_headers(["junk"], ["a=1"]) == {} and trace_headers([], ["a=1"]) == {}
