"""LoRA model names against a server launched without ``--enable-lora`` (the contract backends).

What the router relies on (``router/state/models.py``): SGLang 0.5.23 splits any ``model`` holding a
colon that is not exactly the served name (``serving_base._parse_model_parameter``; an alias
like ``tl:8b`` reads as adapter ``8b``), ``lora_path`` names an adapter too, and without LoRA
either is a flat 400 naming the adapter (``tokenizer_manager._validate_and_resolve_lora``);
the served name alone is served. ``/v1/models`` lists no adapter then.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.backend import Backend

NOT_ENABLED = "LoRA adapter '{}' was requested, but LoRA is not enabled."


def _chat(backend: Backend, **body: Any) -> dict[str, Any]:
    return {"model": backend.model, "temperature": 0, "ignore_eos": True, "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}], **body}


@pytest.mark.parametrize(("body", "adapter"), [
    ({"model": "{model}:sql"}, "sql"),
    ({"model": "tl:8b"}, "8b"),             # any name with a colon splits at its first one
    ({"lora_path": "sql"}, "sql"),
])
def test_an_adapter_without_lora_is_a_flat_400(backend: Backend, body: dict[str, Any], adapter: str) -> None:
    doc = {k: v.format(model=backend.model) if isinstance(v, str) else v for k, v in body.items()}
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, **doc))
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["object"] == "error" and err["code"] == 400
    assert err["message"].startswith(NOT_ENABLED.format(adapter))


def test_the_served_name_and_no_adapters_are_listed(backend: Backend) -> None:
    with backend.client() as c:
        assert c.post("/v1/chat/completions", json=_chat(backend)).status_code == 200
        assert c.post("/v1/chat/completions", json=_chat(backend, model=f"{backend.model}: ")).status_code == 200
        cards = c.get("/v1/models").json()["data"]
    assert [card["id"] for card in cards] == [backend.model]
    assert all(card.get("parent") is None for card in cards)
