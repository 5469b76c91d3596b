"""LoRA adapters: SGLang 0.5.23's ``--enable-lora``/``--lora-paths`` and how a request picks one.

- ``--lora-paths`` entries are ``<name>=<path>`` or a bare ``<path>`` whose name is the path
  itself (``srt/arg_groups/lora_hook.py``); ``/v1/models`` lists each loaded adapter as a card
  with ``id`` its name, ``root`` its path and ``parent`` the served model
  (``http_server.available_models``).
- ``model`` picks an adapter (``serving_base._parse_model_parameter``): a name without a colon,
  or exactly the served name, is the base model; ``<served name>:<adapter>`` splits after the
  served name; any other name with a colon splits at its first colon (so an alias such as
  ``tl:8b`` reads as adapter ``8b``, sgl-project/sglang#12745); an adapter that strips to ""
  is none. The base part is not checked.
- Without an adapter in ``model``, ``lora_path`` (a string, or a list for a batch) names it
  (``_resolve_lora_path``: the model's adapter wins). ``/generate`` reads ``lora_path`` only.
- Without ``--enable-lora`` any adapter is 400 "LoRA adapter '<x>' was requested, but LoRA is
  not enabled. ..." (``tokenizer_manager._validate_and_resolve_lora``); an adapter that is not
  loaded is 400 "The following requested LoRA adapters are not loaded: <x>\\nLoaded adapters:
  odict_keys([...])." (``lora_registry.acquire``). Both are ``ValueError``s, which the OpenAI
  handlers answer as 400 ``BadRequest``.
"""

from __future__ import annotations

from typing import Any

from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.errors import ClientError

__all__ = ["adapter_cards", "check_lora", "parse_model"]


def parse_model(model: str, served: str) -> tuple[str, str | None]:
    """``(base, adapter)`` of a request's ``model`` by SGLang's rules (module docstring)."""
    if ":" not in model or model == served:
        return model, None
    if model.startswith(f"{served}:"):
        base, adapter = served, model[len(served) + 1:]
    else:
        base, adapter = model.split(":", 1)
    return base.strip(), adapter.strip() or None


def adapter_cards(cfg: FakeConfig) -> list[dict[str, Any]]:
    """``/v1/models`` cards of the loaded adapters (none without ``enable_lora``)."""
    if not (cfg.enable_lora or cfg.lora_paths):  # SGLang: --lora-paths turns LoRA on
        return []
    return [{"id": name, "object": "model", "created": 0, "owned_by": "sglang", "root": path,
             "parent": cfg.model_name, "max_model_len": None} for name, path in cfg.lora_adapters.items()]


def check_lora(cfg: FakeConfig, body: dict[str, Any], kind: str) -> str | list[Any] | None:
    """The adapter(s) a request asks for, or None; ``ClientError`` (400) as SGLang refuses."""
    model = body.get("model")
    adapter = None
    if kind != "generate" and isinstance(model, str):
        adapter = parse_model(model, cfg.model_name)[1]
    lora: str | list[Any] | None = adapter if adapter is not None else body.get("lora_path")
    if not lora:
        return None
    names = [lora] if isinstance(lora, str) else [n for n in lora if n]
    if not (cfg.enable_lora or cfg.lora_paths):  # SGLang: --lora-paths turns LoRA on
        first = names[0] if names else None
        raise ClientError(
            f"LoRA adapter '{first}' was requested, but LoRA is not enabled. Please launch the "
            "server with --enable-lora flag and preload adapters using --lora-paths or "
            "/load_lora_adapter endpoint.", "BadRequest")
    for name in names:
        if name not in cfg.lora_adapters:
            raise ClientError(
                f"The following requested LoRA adapters are not loaded: {name}\n"
                f"Loaded adapters: odict_keys({list(cfg.lora_adapters)!r}).", "BadRequest")
    return lora
