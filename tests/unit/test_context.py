"""The per-request context on the ASGI scope (router.front.context)."""

from __future__ import annotations

from starlette.requests import Request

from router.front.context import CONTEXT_KEY, RequestContext, attach_context, request_context


def _request(**scope):
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], **scope})


def test_attached_context_is_read_back_from_a_new_request_on_the_same_scope():
    handler = _request()
    context = attach_context(handler, "req-1")
    context.reject_reason = "constrained_decoding"
    # an exception handler builds its own Request on the same scope
    assert request_context(Request(handler.scope)) is context
    assert (context.request_id, context.features, context.reject_reason) == ("req-1", None, "constrained_decoding")


def test_no_context_or_a_foreign_value_reads_as_none():
    assert request_context(_request()) is None
    assert request_context(_request(**{CONTEXT_KEY: {"request_id": "x"}})) is None


def test_attach_replaces_an_earlier_context():
    request = _request()
    attach_context(request, "a")
    second = attach_context(request, "b")
    assert request_context(request) is second and second == RequestContext("b")
