"""Reading a client request (router.front.intake): the Content-Type rule of parse_json (400
``invalid_content_type``, as OpenAI answers) and the header helpers."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from router.errors import InvalidRequest, UnsupportedMediaType
from router.front.intake import header, header_map, header_values, parse_json

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def _request(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers})


@pytest.mark.parametrize("ctype", [b"application/json", b"Application/JSON", b" application/json ",
                                   b"application/json; charset=utf-8", b"APPLICATION/JSON;charset=UTF-8"])
def test_json_content_types_parse(ctype):
    request = _request([(b"content-type", ctype)])
    assert parse_json(request, BODY)["model"] == "m"
    assert parse_json(request, BODY, header_map(request.scope))["model"] == "m"


@pytest.mark.parametrize("headers", [[], [(b"content-type", b"text/plain")], [(b"content-type", b"")],
                                     [(b"content-type", b"application/jsonx")],
                                     [(b"content-type", b"text/plain"), (b"content-type", b"application/json")]])
def test_other_content_types_are_refused(headers):
    request = _request(headers)
    with pytest.raises(UnsupportedMediaType) as exc:
        parse_json(request, BODY, header_map(request.scope))
    assert (exc.value.status, exc.value.code, exc.value.param, exc.value.message) == (
        400, "invalid_content_type", None, "Content-Type must be application/json")


def test_content_type_is_checked_before_the_json():
    with pytest.raises(UnsupportedMediaType):
        parse_json(_request([]), b"{")
    with pytest.raises(InvalidRequest) as exc:
        parse_json(_request([(b"content-type", b"application/json")]), b"{")
    assert exc.value.code == "invalid_json"


def test_header_helpers_take_the_first_of_repeated_headers():
    scope = _request([(b"x-a", b"1"), (b"x-b", b"\xe9"), (b"x-a", b"2")]).scope
    headers = header_map(scope)
    assert (header(headers, b"x-a"), header(headers, b"x-b"), header(headers, b"x-c")) == ("1", "\xe9", None)
    assert header_values(scope, headers, b"x-a") == ["1", "2"]
    assert header_values(scope, headers, b"x-c") == []


def _body_request(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> Request:
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return messages.pop(0)

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


def test_read_body_checks_the_declared_length():
    import asyncio

    from router.errors import RequestTooLarge
    from router.front.intake import read_body

    ok = _body_request([(b"content-length", b" 6 ")], [b"abc", b"def"])
    assert asyncio.run(read_body(ok, 6)) == b"abcdef"
    with pytest.raises(InvalidRequest) as exc:
        asyncio.run(read_body(_body_request([(b"content-length", b"six")], [b"abcdef"]), 6))
    assert (exc.value.code, exc.value.message) == ("invalid_header", "invalid Content-Length header")
    with pytest.raises(RequestTooLarge) as big:
        asyncio.run(read_body(_body_request([(b"content-length", b"7")], [b"abcdefg"]), 6))
    assert big.value.message == "request body of 7 bytes exceeds the 6-byte limit"
    with pytest.raises(RequestTooLarge):
        asyncio.run(read_body(_body_request([], [b"abcd", b"efg"]), 6))
