"""The OpenAI error shape, asserted (:func:`assert_e400`)."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["assert_e400"]


def assert_e400(r: httpx.Response, status: int, code: str | None, param: str | None,
                type_: str = "invalid_request_error") -> dict[str, Any]:
    """Assert ``r`` is an OpenAI-shaped JSON error of ``status`` with exactly these ``type``,
    ``code`` and ``param`` (and a message); return its ``error`` object."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"], err["param"]) == (type_, code, param)
    return err
