"""The forwarded body: fields spliced into the client's JSON without re-serialising it."""

from __future__ import annotations

import orjson
import pytest

from router.front.body import add_fields as _add_fields


@pytest.mark.parametrize("body", [
    b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "h\\u00e9 }"}]}  \r\n\t',
    b'{}',
    b' { } ',
])
def test_spliced_body_parses_to_doc_plus_fields(body):
    doc = orjson.loads(body)
    fields = {"max_tokens": 64, "rid": "specgate-ab12-7"}
    out = _add_fields(body, doc, fields)
    assert orjson.loads(out) == {**doc, **fields}
    assert list(orjson.loads(out)) == [*doc, *fields]
    if doc:  # the client's bytes are kept as they were
        assert out.startswith(body.rstrip()[:-1])


def test_existing_key_falls_back_to_one_value():
    body = b'{"messages":[],"max_tokens":null}'
    out = _add_fields(body, orjson.loads(body), {"max_tokens": 32})
    assert out == b'{"messages":[],"max_tokens":32}'


def test_no_fields_returns_the_same_bytes():
    body = b'{"a":1}'
    assert _add_fields(body, {"a": 1}, {}) is body
