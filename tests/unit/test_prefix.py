"""Prefix-cache-aware endpoint choice (router.decision.prefix): the picker table, chains, the index."""

from __future__ import annotations

import hashlib
import operator
import random

import pytest

from router.decision.prefix import (
    Candidate,
    PickReason,
    PrefixIndex,
    chain_for_request,
    first_user_end,
    pick_endpoint,
    prefix_chain,
    rendezvous_score,
)
from router.request.features import Rendered

A, B, C = "http://a:1", "http://b:1", "http://c:1"
ANCHOR = 5
# The rendezvous order of A, B, C for ANCHOR (fixed: the score is the same in every process).
RANKED = sorted((A, B, C), key=lambda u: rendezvous_score(u, ANCHOR), reverse=True)


def test_rendezvous_order_is_fixed() -> None:
    assert rendezvous_score(A, ANCHOR) == rendezvous_score(A, ANCHOR)
    assert RANKED == [C, A, B]


def cands(*rows: tuple[str, bool, int, int]) -> list[Candidate]:
    return [Candidate(u, h, load, cached) for u, h, load, cached in rows]


@pytest.mark.parametrize(("rows", "kw", "expected"), [
    # a match above 0.3 * P wins over a lower load
    ([(A, True, 5, 400), (B, True, 0, 0)], {}, (A, PickReason.PREFIX_MATCH)),
    # exactly 0.3 * P is not enough (SGLang: match_rate > threshold), nor is a match within the anchor
    # (then rendezvous: A ranks above B but is over the load bound ceil(1.25 * 6 / 2) = 4)
    ([(A, True, 5, 300), (B, True, 0, 0)], {}, (B, PickReason.RENDEZVOUS)),
    ([(A, True, 5, 400), (B, True, 0, 0)], {"anchor_tokens": 400}, (B, PickReason.RENDEZVOUS)),
    # the best match wins; equal matches: least load; equal load too: rendezvous rank
    ([(A, True, 0, 350), (B, True, 9, 600)], {}, (B, PickReason.PREFIX_MATCH)),
    ([(A, True, 3, 600), (B, True, 2, 600)], {}, (B, PickReason.PREFIX_MATCH)),
    ([(A, True, 2, 600), (B, True, 2, 600)], {}, (A, PickReason.PREFIX_MATCH)),
    # load guard: imbalance needs both max - min > 64 and max > 1.5 * min
    ([(A, True, 100, 900), (B, True, 30, 0)], {}, (B, PickReason.LOAD_GUARD)),
    ([(A, True, 94, 900), (B, True, 30, 0)], {}, (A, PickReason.PREFIX_MATCH)),   # 64 apart
    ([(A, True, 200, 900), (B, True, 134, 0)], {}, (A, PickReason.PREFIX_MATCH)),  # 200 < 1.5 * 134
    ([(A, True, 202, 900), (B, True, 134, 0)], {}, (B, PickReason.LOAD_GUARD)),
    # no match: rendezvous in rank order C, A, B among those under the bound ceil(1.25 * 13 / 3) = 6
    ([(A, True, 0, 0), (B, True, 0, 0), (C, True, 0, 0)], {}, (C, PickReason.RENDEZVOUS)),
    ([(A, True, 4, 0), (B, True, 2, 0), (C, True, 6, 0)], {}, (A, PickReason.RENDEZVOUS)),
    ([(A, True, 5, 0), (B, True, 2, 0), (C, True, 5, 0)], {}, (C, PickReason.RENDEZVOUS)),
    # a continued conversation follows its rendezvous choice whatever the load bound says
    ([(A, True, 4, 0), (B, True, 2, 0), (C, True, 6, 0)], {"continued": True}, (C, PickReason.RENDEZVOUS)),
    # ... but not past the load guard
    ([(A, True, 4, 0), (B, True, 2, 0), (C, True, 90, 0)], {"continued": True}, (B, PickReason.LOAD_GUARD)),
    # unhealthy and excluded endpoints never win, even with the best match
    ([(A, False, 0, 900), (B, True, 3, 0), (C, True, 3, 0)], {}, (C, PickReason.RENDEZVOUS)),
    ([(A, True, 0, 900), (B, True, 3, 0), (C, True, 3, 0)], {"exclude": {A, C}}, (B, PickReason.RENDEZVOUS)),
    # no anchor (token ids, batches): least load, ties round robin by `tie` over sorted URLs
    ([(A, True, 1, 0), (B, True, 1, 0), (C, True, 0, 0)], {"anchor": None}, (C, PickReason.LEAST_LOAD)),
    ([(A, True, 1, 0), (B, True, 1, 0)], {"anchor": None, "tie": 0}, (A, PickReason.LEAST_LOAD)),
    ([(A, True, 1, 0), (B, True, 1, 0)], {"anchor": None, "tie": 3}, (B, PickReason.LEAST_LOAD)),
    ([(A, True, 1, 500), (B, True, 1, 500)], {"anchor": None, "tie": 1}, (B, PickReason.PREFIX_MATCH)),
])
def test_pick_table(rows, kw, expected) -> None:
    args = {"prompt_tokens": 1000, "anchor": ANCHOR, "hash_load_factor": 1.25, **kw}
    assert pick_endpoint(cands(*rows), **args) == expected


def test_pick_nothing_healthy() -> None:
    assert pick_endpoint(cands((A, False, 0, 0)), prompt_tokens=10, anchor=ANCHOR) is None
    assert pick_endpoint(cands((A, True, 0, 0)), prompt_tokens=10, anchor=ANCHOR, exclude={A}) is None


def test_the_least_loaded_is_always_within_the_load_bound() -> None:
    # cap = ceil(1.25 * (0 + 0 + 1) / 2) = 1: both idle endpoints qualify, rank decides
    assert pick_endpoint(cands((A, True, 0, 0), (B, True, 0, 0)), prompt_tokens=10,
                         anchor=ANCHOR, hash_load_factor=1.25) == (A, PickReason.RENDEZVOUS)
    # C (rank 1) at 1, the others at 0: cap = ceil(1.25 * 2 / 3) = 1, so C (1 + 1 > 1) is out
    assert pick_endpoint(cands((A, True, 0, 0), (B, True, 0, 0), (C, True, 1, 0)), prompt_tokens=10,
                         anchor=ANCHOR, hash_load_factor=1.25) == (A, PickReason.RENDEZVOUS)
    # with a factor of 2: cap = ceil(2 * 2 / 3) = 2, so C (1 + 1 <= 2) keeps its rank
    assert pick_endpoint(cands((A, True, 0, 0), (B, True, 0, 0), (C, True, 1, 0)), prompt_tokens=10,
                         anchor=ANCHOR, hash_load_factor=2.0) == (C, PickReason.RENDEZVOUS)


# -- chains ------------------------------------------------------------------------------------


def test_chain_blocks_and_anchor() -> None:
    text = "s" * 100 + "<|user|>hello there\n<|assistant|>"
    end = first_user_end(text, [{"role": "system", "content": "s" * 100},
                                {"role": "user", "content": "hello there"}])
    assert end == 100 + len("<|user|>hello there")
    chain = prefix_chain(text, block_chars=16, max_blocks=64, anchor_end=end)
    assert len(chain.keys) == len(text) // 16 == 8
    assert chain.anchor_blocks == end // 16 == 7
    assert chain.chars == len(text)
    # the next turn extends the text: same anchor, same first keys
    longer = prefix_chain(text + "tok0 tok1\n<|user|>more\n<|assistant|>", block_chars=16, max_blocks=64,
                          anchor_end=end)
    assert longer.keys[:8] == chain.keys and longer.anchor == chain.anchor
    # another conversation with the same system prompt: shares the system blocks, not the anchor
    other = prefix_chain("s" * 100 + "<|user|>bye now\n<|assistant|>", block_chars=16, max_blocks=64,
                         anchor_end=100 + len("<|user|>bye now"))
    assert other.keys[:6] == chain.keys[:6] and other.keys[6] != chain.keys[6]
    assert other.anchor != chain.anchor


def test_chain_caps_and_short_prompts() -> None:
    assert prefix_chain("x" * 15, block_chars=16, max_blocks=4) == ((), None, 0, 15, 16, False, 0, None)
    capped = prefix_chain("x" * 1000, block_chars=16, max_blocks=4)
    assert len(capped.keys) == 4 and capped.anchor_blocks == 4
    assert capped.tokens(2, 100) == 2 * 16 * 100 // 1000


def test_anchor_is_the_stable_hash_read_lazily() -> None:
    text = "s" * 20 + "<|user|>hello there\n<|assistant|>"
    end = 20 + len("<|user|>hello there")
    chain = prefix_chain(text, block_chars=16, max_blocks=64, anchor_end=end)
    salted = prefix_chain(text, block_chars=16, max_blocks=64, anchor_end=end, salt="sql")
    assert chain.anchor is not None and salted.anchor is not None
    assert chain.anchor._value is None   # not hashed until read
    digest = hashlib.blake2b(text[:end].encode(), digest_size=8).digest()
    assert int(chain.anchor) == operator.index(chain.anchor) == int.from_bytes(digest, "big")
    assert chain.anchor == int(chain.anchor) and hash(chain.anchor) == hash(int(chain.anchor))
    digest = hashlib.blake2b(f"sql\x00{text[:end]}".encode(), digest_size=8).digest()
    assert int(salted.anchor) == int.from_bytes(digest, "big")
    assert rendezvous_score("http://a:1", chain.anchor) == rendezvous_score("http://a:1", int(chain.anchor))
    # the anchor's partial block (characters 32..end) keys the anchor in the index; a boundary has none
    assert chain.anchor_blocks == 2 and chain.anchor_key is not None and chain.anchor_key[0] == "anchor"
    assert salted.anchor_key != chain.anchor_key
    assert prefix_chain(text, block_chars=16, max_blocks=64, anchor_end=32).anchor_key is None


def test_chain_for_request_kinds() -> None:
    text = "<|user|>" + "q" * 40 + "\n<|assistant|>"
    doc = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q" * 40}]}]}
    chat = chain_for_request(Rendered(texts=(text,)), doc, "chat", block_chars=8, max_blocks=99, anchor_blocks=2)
    assert chat is not None and chat.anchor_blocks == (8 + 40) // 8 and not chat.continued
    doc2 = {"messages": [*doc["messages"], {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]}
    later = chain_for_request(Rendered(texts=(text + "a\n<|user|>b\n<|assistant|>",)), doc2, "chat",
                              block_chars=8, max_blocks=99, anchor_blocks=2)
    assert later is not None and later.continued and later.anchor == chat.anchor
    comp = chain_for_request(Rendered(texts=(text,), special=True), {"prompt": text}, "completions",
                             block_chars=8, max_blocks=99, anchor_blocks=2)
    assert comp is not None and comp.anchor_blocks == 2
    assert chain_for_request(Rendered(texts=(text, text)), {}, "completions", block_chars=8, max_blocks=99,
                             anchor_blocks=2) is None
    assert chain_for_request(Rendered(ids_len=30), {}, "completions", block_chars=8, max_blocks=99,
                             anchor_blocks=2) is None


def test_first_user_end_not_found() -> None:
    assert first_user_end("<|system|>x", [{"role": "system", "content": "x"}]) is None
    assert first_user_end("<|user|>HELLO", [{"role": "user", "content": "hello"}]) is None
    assert first_user_end("<|user|>", [{"role": "user", "content": "  "}]) is None


# -- the index -----------------------------------------------------------------------------------


def chain_of(text: str, block: int = 4):
    return prefix_chain(text, block_chars=block, max_blocks=1000)


def test_match_is_longest_prefix_per_endpoint_and_read_only() -> None:
    idx = PrefixIndex(max_blocks_per_endpoint=100)
    turn1 = chain_of("aaaabbbbcccc")
    turn2 = chain_of("aaaabbbbccccddddeeee")
    idx.record(A, turn1)
    idx.record(B, chain_of("aaaaXXXX"))
    before = idx.entries()
    # P = 20 tokens over 20 chars: one token per char, 4 per block
    assert idx.match(turn2, 20) == {A: 12, B: 4}
    assert idx.entries() == before
    assert idx.match(chain_of("zzzzaaaa"), 8) == {}
    assert idx.match(chain_of("zzz"), 3) == {}


def test_memory_bound_evicts_tails_first() -> None:
    idx = PrefixIndex(max_blocks_per_endpoint=6)
    for i in range(50):
        idx.record(A, chain_of(f"{i:04d}" * 5))   # 5 blocks each, distinct first blocks
        assert idx.entries() <= 6
    assert idx.entries() == 6
    last = chain_of("0049" * 5)
    assert idx.matched_blocks(A, last) == 5
    # the one before kept only its head (prefix keys are newer than their extensions)
    prev = chain_of("0048" * 5)
    assert idx.matched_blocks(A, prev) == 1
    assert idx.match(prev, 20) == {A: 4}


def test_binary_search_equals_linear_scan_under_eviction() -> None:
    idx = PrefixIndex(max_blocks_per_endpoint=37)
    texts = [("sys!" * 3) + f"{c:02d}".ljust(4, "-") * (1 + c % 7) for c in range(30)]
    for t in texts:
        idx.record(A, chain_of(t))
        idx.record(B, chain_of(t[::-1]))
    for t in texts:
        ch = chain_of(t + "more")
        got = idx.match(ch, len(t) + 4)
        for url in (A, B):
            assert got.get(url, 0) == ch.tokens(idx.matched_blocks(url, ch), len(t) + 4)


def test_retain_drops_endpoints() -> None:
    idx = PrefixIndex(max_blocks_per_endpoint=10)
    idx.record(A, chain_of("aaaabbbb"))
    idx.record(B, chain_of("aaaabbbb"))
    assert idx.retain({B, C}) == [A]
    assert idx.endpoints() == [B]
    assert idx.match(chain_of("aaaabbbbcccc"), 12) == {B: 8}


def test_index_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError, match="max_blocks_per_endpoint"):
        PrefixIndex(max_blocks_per_endpoint=0)


def test_conversations_move_when_an_endpoint_goes_unhealthy_and_nothing_stale_returns() -> None:
    """Place 12 conversations, take one endpoint out, route every turn again, bring it back."""
    idx = PrefixIndex(max_blocks_per_endpoint=1000)
    urls = [A, B, C]
    convs = [f"<|system|>be brief\n<|user|>question {i:02d} " + "x" * 40 for i in range(12)]

    def route(text: str, healthy: set[str]) -> str:
        idx.retain(healthy)
        end = text.index("x")
        ch = prefix_chain(text, block_chars=8, max_blocks=500, anchor_end=end)
        match = idx.match(ch, len(text))
        got = pick_endpoint([Candidate(u, u in healthy, 0, match.get(u, 0)) for u in urls],
                            prompt_tokens=len(text), anchor=ch.anchor,
                            anchor_tokens=ch.tokens(ch.anchor_blocks, len(text)))
        assert got is not None
        idx.record(got[0], ch)
        return got[0]

    first = [route(t, set(urls)) for t in convs]
    assert sorted(first) == [A] * 4 + [B] * 3 + [C] * 5   # the fixed rendezvous hash of each anchor
    turn2 = [t + "\n<|assistant|>reply\n<|user|>next" for t in convs]
    assert [route(t, set(urls)) for t in turn2] == first
    moved = [route(t + " again", {B, C}) for t in turn2]
    assert [m for f, m in zip(first, moved) if f != A] == [f for f in first if f != A]
    assert A not in moved and A not in idx.endpoints()
    # A comes back empty: conversations that moved stay where their cache now is
    back = [route(t + " again and again", set(urls)) for t in turn2]
    assert back == moved


def test_second_turn_finds_a_first_turn_that_ends_inside_the_anchors_last_block() -> None:
    """The first turn's prompt ends a few template characters after the first user message, so
    its chain holds no whole block past the anchor's; the anchor's own key tells the endpoint
    that served it, and the second turn goes there even when the first turn was placed off
    its rendezvous choice (the load bound). Seen with the tiny Llama's template: 33 characters
    after the first user message, about half the conversations of benchmarks/multiturn.py."""
    system, user = "s" * 100, "q" * 21
    turn1 = f"<|system|>{system}<|user|>{user}<a>"   # the anchor ends at 10 + 100 + 8 + 21 = 139
    end = len(turn1) - 3
    first = prefix_chain(turn1, block_chars=16, max_blocks=64, anchor_end=end)
    assert (end, len(turn1)) == (139, 142)
    assert len(first.keys) == first.anchor_blocks == 8 and first.anchor_chars == end
    turn2 = prefix_chain(turn1 + "answer<e><|user|>more words<a>", block_chars=16, max_blocks=64,
                         anchor_end=end, continued=True)
    assert turn2.anchor == first.anchor and turn2.keys[:8] == first.keys
    p = turn2.chars  # one token per character
    anchor_tokens = turn2.tokens(turn2.anchor_blocks, p)
    ranked = sorted((A, B), key=lambda u: rendezvous_score(u, first.anchor), reverse=True)
    off_hash = ranked[1]
    idx = PrefixIndex(max_blocks_per_endpoint=100)
    idx.record(off_hash, first)                       # placed off its hash by the load bound
    other_start = f"<|system|>{system}<|user|>{'z' * 40}"
    idx.record(ranked[0], prefix_chain(other_start + "<a>", block_chars=16, max_blocks=64,
                                       anchor_end=len(other_start)))  # another conversation
    match = idx.match(turn2, p)
    assert match == {off_hash: end, ranked[0]: 7 * 16}
    assert match[off_hash] > anchor_tokens == 8 * 16
    got = pick_endpoint([Candidate(u, True, 0, match.get(u, 0)) for u in (A, B)], prompt_tokens=p,
                        anchor=turn2.anchor, anchor_tokens=anchor_tokens, continued=True)
    assert got == (off_hash, PickReason.PREFIX_MATCH)
    # another first message with the same whole blocks: the anchor key is not its own
    other = prefix_chain(f"<|system|>{system}<|user|>{'q' * 20}Z<a>more", block_chars=16, max_blocks=64,
                         anchor_end=end)
    assert other.keys[:8] == first.keys and other.anchor != first.anchor
    assert idx.match(other, other.chars)[off_hash] == 8 * 16


def test_find_of_a_long_needle_is_str_find() -> None:
    from router.decision.prefix import _find

    rng = random.Random(7)
    for _ in range(3000):
        unit = "".join(rng.choice("ab") for _ in range(rng.randint(1, 3)))
        text = "".join(rng.choice((unit, "a", "b")) for _ in range(rng.randint(0, 400)))
        start = rng.randint(0, max(0, len(text) - 1))
        needle = text[start:start + rng.randint(60, 200)] if rng.random() < 0.7 else unit * rng.randint(20, 120)
        assert _find(text, needle) == text.find(needle), (text, needle)
    head = "h" * 64
    text = (head + "x") * 10 + head + "tail"
    assert _find(text, head + "tail") == text.find(head + "tail") == 650
