"""Seeded random multi-turn chats through the whole prefix path (:func:`router.decision.prefix.
chain_for_request`, :meth:`router.decision.prefix.PrefixIndex.match`, :func:`router.decision.prefix.pick_endpoint`,
:meth:`router.decision.prefix.PrefixIndex.record`): several pools and endpoints, small blocks, a block
cap, a small per-endpoint key cap (eviction), LoRA adapters, content lists, completions and
batches. The decision trace is pinned by its digest: a change to any routing decision, match
estimate, anchor or eviction changes it (the trace holds no process-local hash)."""

from __future__ import annotations

import hashlib
import random
from types import ModuleType, SimpleNamespace
from typing import Any

import router.decision.prefix

_SYSTEMS = ["", "You are terse.", "You are a helpful assistant who answers in full sentences."]
_WORDS = ["alpha", "beta", "gamma", "delta", "kv", "cache", "route", "  ", "é", "x" * 30]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 12)))


def _content(rng: random.Random, text: str) -> Any:
    r = rng.random()
    if r < 0.15:
        return [{"type": "text", "text": text}, {"type": "image_url"}, {"type": "input_text", "text": "p2"}]
    if r < 0.2:
        return None
    return f" {text} " if r < 0.3 else text


def _render(messages: list[Any]) -> str:
    out = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        c = m.get("content")
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") in ("text", "input_text"))
        out.append(f"<|{m.get('role')}|>\n{(c or '').strip()}</s>\n")
    return "".join(out) + "<|assistant|>\n"


def _request(rng: random.Random, convs: list[list[Any]]) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    r = rng.random()
    if r < 0.05:
        return "completion", {"prompt": _text(rng)}, (_text(rng),)
    if r < 0.08:
        return "completion", {"prompt": ["a", "b"]}, ("a", "b")
    if convs and rng.random() < 0.6:
        msgs = list(rng.choice(convs))
        msgs += [{"role": "assistant", "content": _content(rng, _text(rng))},
                 {"role": "user", "content": _content(rng, _text(rng))}]
    else:
        system = rng.choice(_SYSTEMS)
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": _content(rng, _text(rng))}]
        if rng.random() < 0.05:
            msgs.insert(0, "junk")
        if rng.random() < 0.05:
            msgs.insert(0, {"role": "assistant", "content": "hi"})
    convs.append(msgs)
    if len(convs) > 40:
        convs.pop(rng.randrange(len(convs)))
    return "chat", {"messages": msgs}, (_render(msgs),)


def trace(mod: ModuleType, seed: int, requests: int) -> list[Any]:
    """The decision trace of ``requests`` random requests through ``mod`` (a module with
    :mod:`router.decision.prefix`'s API), seeded."""
    rng = random.Random(seed)
    block, max_blocks, anchor_blocks = rng.choice([4, 8, 16]), rng.choice([3, 8, 64]), rng.choice([1, 2, 4])
    pools = {f"p{i}": [f"http://e{i}-{j}" for j in range(rng.randint(1, 4))] for i in range(rng.randint(1, 3))}
    idx = {p: mod.PrefixIndex(max_blocks_per_endpoint=rng.choice([5, 20, 1000])) for p in pools}
    convs: list[list[Any]] = []
    out: list[Any] = []
    for i in range(requests):
        kind, doc, texts = _request(rng, convs)
        adapters = rng.choice([(), (), ("a",), ("b", "a"), ("a", "b")])
        chain = mod.chain_for_request(SimpleNamespace(texts=texts), doc, kind, block_chars=block,
                                      max_blocks=max_blocks, anchor_blocks=anchor_blocks, adapters=adapters)
        if chain is None:
            out.append(None)
            continue
        tokens = rng.choice([0, 1, max(1, chain.chars // 4), chain.chars])
        matches = {p: ix.match(chain, tokens) for p, ix in idx.items()}
        pool = rng.choice(list(pools))
        big = rng.random() < 0.1
        cands = [mod.Candidate(u, rng.random() < 0.9, rng.randint(0, 200 if big else 3), matches[pool].get(u, 0))
                 for u in pools[pool]]
        exclude = {u for u in pools[pool] if rng.random() < 0.1}
        anchor = chain.anchor
        pick = mod.pick_endpoint(cands, prompt_tokens=tokens, anchor=anchor,
                                 anchor_tokens=chain.tokens(chain.anchor_blocks, tokens),
                                 cache_threshold=rng.choice([0.0, 0.3]), balance_abs_threshold=rng.choice([-1, 0, 64]),
                                 balance_rel_threshold=rng.choice([0.5, 1.5]), hash_load_factor=rng.choice([1.0, 1.5]),
                                 exclude=exclude, tie=i,
                                 continued=chain.continued)
        if pick is not None:
            idx[pool].record(pick[0], chain)
        if rng.random() < 0.02:
            idx[pool].retain(set(pools[pool][1:]))
        out.append((len(chain.keys), None if anchor is None else int(anchor), chain.anchor_blocks, chain.chars,
                    chain.continued, chain.anchor_chars, chain.anchor_key is None,
                    sorted((p, sorted(m.items())) for p, m in matches.items()),
                    pick and (pick[0], str(pick[1])), [idx[p].entries(u) for p in pools for u in pools[p]]))
    return out


def digest(mod: ModuleType, seeds: range, requests: int) -> str:
    """SHA-256 over the traces of ``seeds``."""
    h = hashlib.sha256()
    for seed in seeds:
        h.update(repr(trace(mod, seed, requests)).encode())
    return h.hexdigest()


def test_random_chats_route_as_pinned() -> None:
    assert digest(router.decision.prefix, range(40), 150) == "c0001ddfe74b2aa8726d93d6ba951f0f748075efe316a2a7e8e5406af828bfbd"
