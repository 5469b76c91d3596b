"""Request body JSON: one rule for duplicate keys (router.front.body), checked against a reference walk."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from router.errors import InvalidRequest
from router.front.body import MAX_PATH_CHARS, find_duplicate_key, has_duplicate_keys, loads_unique

MSG = '[{"role":"user","content":"hi"}]'


@pytest.mark.parametrize(("raw", "path"), [
    ('{"model":"MODEL","max_tokens":100000,"messages":' + MSG + ',"max_tokens":8}', "max_tokens"),
    ('{"model":"junk-model","max_tokens":8,"messages":' + MSG + ',"model":"MODEL"}', "model"),
    ('{"model":"MODEL","stream":false,"max_tokens":8,"messages":' + MSG + ',"stream":true}', "stream"),
    ('{"model":"MODEL","max_tokens":100000,"messages":' + MSG + ',"max_\\u0074okens":8}', "max_tokens"),
    ('{"model":"MODEL","messages":[{"role":"user","content":"' + "x" * 3000 + '","content":"hi"}]}',
     "messages[0].content"),
    ('{"a" : 1 ,\n "a"\t:\r2}', "a"),                                   # any JSON spacing
    ('{"m":[{"x":1},{"y":{"z":[0,{"k":1,"k":2}]}}]}', "m[1].y.z[1].k"),
    ('{"\\u00e9":1,"\u00e9":2}', "\u00e9"),                              # escaped vs raw UTF-8
    ('{"a":"\\u003a","a":1}', "a"),                                       # an escaped colon: exact walk
    ('{"a":{"b":1},"a":{"b":1}}', "a"),                                   # equal values too
    ('{"s":"x\\":\\"y","s":"z"}', "s"),                                   # colons and quotes in strings
])
def test_duplicate_key_is_refused_with_its_path(raw, path):
    with pytest.raises(InvalidRequest) as exc:
        loads_unique(raw.encode())
    err = exc.value
    assert (err.status, err.type, err.code, err.param) == (400, "invalid_request_error", "duplicate_key", path)
    assert err.message == f"duplicate key `{path}` in the request body"


@pytest.mark.parametrize("raw", [
    '{"model":"MODEL","messages":' + MSG + ',"max_tokens":8}',
    '{"a:b":"c:d", "e" : {"f":[{"g":1}, {"g":2}]}, "t": "12:00:00"}',  # same key in sibling objects
    '{"a":"\\u003a","b":"\\u003A:"}', '{"max_tokens":1,"max_Tokens":2}', '{}', '[]', '"x:y"', '3',
    '{"k":"\\\\u003a","K":1}',                                          # an escaped backslash, then u003a
])
def test_unique_keys_parse_as_orjson_does(raw):
    assert loads_unique(raw.encode()) == orjson.loads(raw)


def test_not_json_is_invalid_json():
    for raw in (b"{", b'{"a":NaN}', b"\x1f\x8b\x08\x00", b'{"a":"\xff"}'):
        with pytest.raises(InvalidRequest) as exc:
            loads_unique(raw)
        assert (exc.value.code, exc.value.param) == ("invalid_json", None)


def test_deep_documents_use_the_exact_walk():
    deep = b'{"a":' * 300 + b"1" + b"}" * 300  # deeper than orjson writes (254)
    assert loads_unique(deep)["a"]["a"]["a"]
    dup = b'{"a":' * 300 + b'{"b":1,"b":2}' + b"}" * 300
    with pytest.raises(InvalidRequest) as exc:
        loads_unique(dup)
    assert exc.value.param.startswith("a.a.a") and exc.value.param.endswith("...")
    assert len(exc.value.param) == MAX_PATH_CHARS


@pytest.mark.parametrize("size", [100, 5_000, 20_000, 300_000])
def test_fast_identity_agrees_with_the_walk_on_random_documents(size):
    """Large bodies take the numpy scans: every seeded document, with or without an injected
    duplicate, escapes and colons in strings, gets the reference walk's answer."""
    rng = random.Random(size)
    alphabet = ['a', ':', ' ', '"', '\\', '\n', 'é', '\\u003a', 'k']

    def text(n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    for _ in range(12):
        doc = {"model": "m", "messages": [{"role": "user", "content": text(size // 20)} for _ in range(10)]}
        raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).replace("\\\\u003a", "\\u003a")
        if rng.random() < 0.5:  # a repeated key inside one message
            at = raw.index('"role"', rng.randrange(len(raw) // 2))
            raw = raw[:at] + '"role":"x",' + raw[at:]
        body = raw.encode()
        expect = find_duplicate_key(raw) is not None
        assert has_duplicate_keys(body, orjson.loads(body)) is expect


def test_large_bodies_are_scanned_in_windows_without_missing_an_escape_at_a_boundary():
    from router.front.body import _WINDOW

    filler = '"' + "a" * 60 + '",'
    for at in (_WINDOW - 3, _WINDOW - 1, _WINDOW, 2 * _WINDOW + 1):  # where the escaped colon starts
        head = '{"k":"' + "b" * (at - 6) 
        raw = head + '\\u003a","k":1,"m":[' + filler * 1000 + '"z"]}'
        assert raw.index("\\u003a") == at
        with pytest.raises(InvalidRequest) as exc:
            loads_unique(raw.encode())
        assert exc.value.param == "k"
        assert loads_unique(raw.replace('"k":1', '"j":1').encode())["j"] == 1


@pytest.mark.parametrize("size", [60, 400, 3_000])
def test_small_bodies_inline_check_agrees_with_the_walk(size):
    """Bodies up to 4 KiB without ``\\u003`` take loads_unique's inline colon count: nested
    objects, keys written escaped (``"\\u0061"`` is ``a``), colons and quotes inside strings and
    keys, with or without a repeated key, all get the reference walk's answer."""
    rng = random.Random(size)
    keys = ["a", "\\u0061", "b", "a:b", 'x\\":\\"y', "\\u00e9", "é", "c"]

    def value(depth: int) -> str:
        pick = rng.random()
        if depth < 4 and pick < 0.3:
            return obj(depth + 1)
        if depth < 4 and pick < 0.45:
            return "[" + ",".join(value(depth + 1) for _ in range(rng.randrange(3))) + "]"
        return json.dumps("".join(rng.choice(['a', ':', '"', '\\', ' ', '{', '}']) for _ in range(size // 60)))

    def obj(depth: int) -> str:
        names = rng.sample(keys, rng.randrange(1, 4))
        return "{" + ",".join(f'"{k}" : {value(depth)}' for k in names) + "}"

    seen = set()
    for _ in range(200):
        raw = obj(0)
        if len(raw.encode()) > 4096 or "\\u003" in raw:
            continue
        expect = find_duplicate_key(raw)
        seen.add(expect is None)
        if expect is None:
            assert loads_unique(raw.encode()) == orjson.loads(raw)
        else:
            with pytest.raises(InvalidRequest) as exc:
                loads_unique(raw.encode())
            assert exc.value.param == expect
    assert seen == {True, False}  # both answers were exercised


def test_small_body_deeper_than_orjson_writes_takes_the_walk():
    deep = b'[' * 300 + b'{"a":1,"a":2}' + b']' * 300  # small, but orjson.dumps refuses it
    with pytest.raises(InvalidRequest) as exc:
        loads_unique(deep)
    assert exc.value.code == "duplicate_key" and exc.value.param.endswith("...")
    assert loads_unique(deep.replace(b'"a":2', b'"b":2'))
