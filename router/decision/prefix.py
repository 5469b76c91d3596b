"""Prefix-cache-aware endpoint choice inside a pool: keep a conversation on the engine that
holds its KV cache, on one router replica or several.

An engine's prefix (radix) cache holds the KV of prompts it served; a request whose prompt
starts with one of them prefills only the rest (SGLang reports the reused part as
``usage.prompt_tokens_details.cached_tokens`` with ``--enable-cache-report``). The router
cannot see that cache cheaply, so it keeps an *approximate* index of what it sent where.

Sources:

- SGLang model gateway ``cache_aware`` policy (``sgl-model-gateway/src/policies/cache_aware.rs``
  and ``tree.rs``): an approximate radix tree of the routed request *text* per worker; a request
  goes to the worker with the longest prefix match when ``matched / len > cache_threshold``
  (default 0.3), otherwise to the least loaded (older versions: the smallest tree); when load is
  imbalanced, ``max - min > balance_abs_threshold`` (64) **and** ``max > balance_rel_threshold
  * min`` (1.5), it routes by shortest queue whatever the match; LRU leaves are evicted above
  ``max_tree_size``; a worker that leaves is removed from the tree.
- The Gateway API Inference Extension / llm-d prefix-cache scorer
  (kubernetes-sigs/gateway-api-inference-extension, ``pkg/epp/scheduling/framework/plugins/
  multi/prefix/plugin.go``): the prompt is cut into fixed-size blocks (64 characters in its
  legacy mode; 16 tokens at ~4 characters per token), each block's hash chained with the
  previous one, so a hash names a whole prefix; a per-server LRU of block hashes
  (31,250 entries by default) stands in for the engine's cache; at most 256 blocks are matched.
- Rendezvous (highest-random-weight) hashing, Thaler & Ravishankar 1998; with the load bound
  of consistent hashing with bounded loads, Mirrokni, Thorup & Zadimoghaddam, arXiv:1608.01350.

Structure (cheap on the hot path in Python: no tree walk, a few dict look-ups):

- :func:`prefix_chain` cuts the rendered prompt (the chat template applied, exactly the text
  the engine tokenises, :meth:`router.request.features.PromptCounter.render`) into blocks of
  ``block_chars`` characters, at most ``max_blocks``; key ``i`` is ``hash((key[i-1], block_i))``.
  A trailing partial block is not keyed (the engine may not keep it either).
- :class:`PrefixIndex` (one per pool per runtime): per endpoint an LRU (``OrderedDict``) of the
  keys last routed there, at most ``max_blocks_per_endpoint`` each (the memory bound).
  :meth:`PrefixIndex.record` touches a chain's keys deepest first, so a prefix key is always
  at least as recent as any key that extends it: eviction drops the tail of a conversation
  before its head (a radix cache's leaf-first LRU), and the keys held for an endpoint are
  prefix-closed, so :meth:`PrefixIndex.match` finds the matched length by binary search
  (``log2(max_blocks)`` look-ups per endpoint). An anchor that ends inside a block is keyed
  too (one more key, its partial block chained like a block key:
  :attr:`PrefixChain.anchor_key`), so a first turn whose prompt ends within that block is
  still found by the second.
- The *anchor* of a request: a stable hash (BLAKE2b, the same in every process) of its prompt
  up to the end of the first user message (the system prompt plus the question that opens the
  conversation), or of the first ``anchor_blocks`` blocks when there is no such message. Every
  turn of a conversation has the same anchor. It is hashed only when read (:class:`Anchor`):
  by a rendezvous choice among several endpoints.
- :func:`pick_endpoint`, pure, in this order over the healthy, not excluded endpoints:

  1. ``load_guard``: loads imbalanced (SGLang's two thresholds above, requests) -> least load.
  2. ``prefix_match``: the best estimated match ``cached_tokens`` exceeds both
     ``cache_threshold * prompt_tokens`` and ``anchor_tokens`` (the anchor's whole blocks: a
     match no longer than the shared system prompt is not this conversation's) -> the best
     matching endpoint (ties: least load, then rendezvous rank).
  3. ``rendezvous``: the request has an anchor -> the endpoint with the highest
     ``rendezvous_score(url, anchor)`` (BLAKE2b keyed by the anchor); for a new conversation (no assistant turn yet) only
     among those whose load stays within the bound
     ``load + 1 <= ceil(hash_load_factor * (total load + 1) / endpoints)`` (the least loaded
     always qualify), for a continued one among all. Replicas that share no state place a new
     conversation on the same endpoint, and a conversation whose match was evicted, or that a
     replica has not seen, goes back to it.
  4. ``least_load``: no anchor (token-id or batched prompts, prefix routing off) -> least load,
     ties broken by ``tie`` over URLs in order (the router's round-robin tie-break).

Limits: the index is an estimate (it does not see engine evictions, restarts or
``/flush_cache``); a ``load_guard`` or load-bound choice on one replica is not known to the
others, so the next turn may miss once; an endpoint that goes unhealthy or leaves its pool is
dropped from the index (:meth:`PrefixIndex.retain`): its conversations go to their rendezvous
choice among the others, and when it returns it starts empty.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, SupportsIndex

if TYPE_CHECKING:
    from router.request.features import Rendered

__all__ = [
    "Anchor",
    "Candidate",
    "PickReason",
    "PrefixChain",
    "PrefixIndex",
    "PrefixRequest",
    "chain_for_request",
    "first_user_end",
    "pick_endpoint",
    "prefix_chain",
    "rendezvous_score",
]


class PickReason(StrEnum):
    """Why :func:`pick_endpoint` chose its endpoint (access-log field ``endpoint_reason``)."""

    PREFIX_MATCH = "prefix_match"
    RENDEZVOUS = "rendezvous"
    LEAST_LOAD = "least_load"
    LOAD_GUARD = "load_guard"


class Anchor:
    """A conversation's anchor (see the module docstring): its stable 64-bit hash, BLAKE2b of
    the (salted) anchor text, the same in every process, computed on first use (``int(a)`` or
    ``operator.index(a)``); only a rendezvous choice among several endpoints reads it, so a
    request that meets one endpoint never hashes its anchor (~0.5 us for a short prompt, ~8 us
    for an 8k-character one). Equal to, and hashes as, that integer.

    Args:
        text: the rendered prompt (characters); the anchor is ``text[:end]``.
        end: where the anchor ends (characters, > 0).
        salt: :func:`prefix_chain`'s ``salt`` ("" for the base model).
    """

    __slots__ = ("_end", "_salt", "_text", "_value")

    def __init__(self, text: str, end: int, salt: str = "") -> None:
        self._text, self._end, self._salt = text, end, salt
        self._value: int | None = None

    def __index__(self) -> int:
        value = self._value
        if value is None:
            text = self._text[:self._end]
            value = self._value = _stable_hash(f"{self._salt}\x00{text}" if self._salt else text)
        return value

    __int__ = __index__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Anchor | int):
            return self.__index__() == operator.index(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.__index__())

    def __repr__(self) -> str:
        return f"Anchor({self.__index__():#018x})"


class PrefixChain(NamedTuple):
    """A rendered prompt's block keys (a named tuple: cheap to build on the hot path).

    Attributes:
        keys: chained block hashes, first block first (process-local ``hash``; never shared).
        anchor: the conversation's anchor (see the module docstring), an :class:`Anchor`
            whose ``int()`` is its stable 64-bit hash, the same in every router replica
            (computed on first use); None when the prompt is shorter than one block.
        anchor_blocks: whole blocks inside the anchor (blocks); a match must exceed it to count
            as this conversation's own.
        chars: length of the rendered prompt (characters).
        block_chars: block size (characters).
        continued: the prompt continues a conversation (a chat with an assistant message):
            some replica already placed it, so its rendezvous choice ignores the load bound.
        anchor_chars: where the anchor ends (characters; 0 without an anchor). Past
            ``anchor_blocks * block_chars`` it ends inside a partial block, which
            :class:`PrefixIndex` keys by ``anchor_key``.
        anchor_key: the index key of an anchor that ends inside a block: ``("anchor", h)``, ``h``
            the process-local ``hash`` of that partial block chained on the anchor's whole
            blocks (like a block key; a tuple, never equal to a block key); None when the anchor
            ends on a block boundary (its whole blocks say it all) or there is none.
    """

    keys: tuple[int, ...]
    anchor: SupportsIndex | None
    anchor_blocks: int
    chars: int
    block_chars: int
    continued: bool = False
    anchor_chars: int = 0
    anchor_key: tuple[str, int] | None = None

    def tokens(self, blocks: int, prompt_tokens: int) -> int:
        """Estimated tokens in the first ``blocks`` blocks: their characters times the prompt's
        own tokens per character (``prompt_tokens / chars``), at most ``prompt_tokens``."""
        if self.chars <= 0:
            return 0
        return min(prompt_tokens, blocks * self.block_chars * prompt_tokens // self.chars)


def _stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (BLAKE2b of the UTF-8 bytes; Python's
    ``hash`` of a str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def prefix_chain(text: str, block_chars: int, max_blocks: int, anchor_end: int | None = None,
                 anchor_blocks: int = 4, continued: bool = False, salt: str = "") -> PrefixChain:
    """The block keys and anchor of one rendered prompt.

    Args:
        text: the rendered prompt (characters, as the engine tokenises it).
        block_chars: characters per block (> 0).
        max_blocks: at most this many blocks are keyed (the rest of a long prompt is ignored).
        anchor_end: end (character offset) of the conversation's anchor, e.g.
            :func:`first_user_end`; None: the first ``anchor_blocks`` blocks.
        anchor_blocks: anchor length in blocks when ``anchor_end`` is None.
        continued: see :attr:`PrefixChain.continued`.
        salt: keys every block and the anchor (the request's LoRA adapters: an engine keeps one
            adapter's KV apart from another's and the base model's, so a prefix sent with one
            is no cache hit for another); "" (the base model) keys as before.

    Cost: one slice and one tuple hash per block and for the anchor's partial block; the
    anchor's BLAKE2b only when :class:`Anchor` is read. Positional arguments on the hot path.
    """
    size = len(text)
    n = size // block_chars
    n = min(n, max_blocks)
    if not n:
        return PrefixChain((), None, 0, size, block_chars)
    base = prev = hash(salt) if salt else 0
    if n == 1:  # a short prompt: no range, no list
        keys: tuple[int, ...] = (hash((base, text[:block_chars])),)
    else:
        out = []
        for start in range(0, n * block_chars, block_chars):
            out.append(prev := hash((prev, text[start:start + block_chars])))
        keys = tuple(out)
    if anchor_end is None or anchor_end <= 0:
        anchor_end = anchor_blocks * block_chars
    anchor_end = min(anchor_end, size, max_blocks * block_chars)
    whole = anchor_end // block_chars  # <= n: anchor_end <= min(size, max_blocks * block_chars)
    cut = whole * block_chars
    anchor_key = (None if anchor_end == cut else
                  ("anchor", hash((keys[whole - 1] if whole else base, text[cut:anchor_end]))))
    return PrefixChain(keys, Anchor(text, anchor_end, salt), whole, size, block_chars, continued,
                       anchor_end, anchor_key)


def first_user_end(text: str, messages: Sequence[Any]) -> int | None:
    """End offset (characters) in the rendered ``text`` of the first user message's content,
    or None when there is no user message with text or the template does not show it verbatim.

    Text parts of a content list are joined with ``" "`` as :mod:`router.request.features` renders
    them; surrounding whitespace is ignored (templates often ``trim`` it).
    """
    return _scan_chat(text, messages)[0]


def _scan_chat(text: str, messages: Sequence[Any]) -> tuple[int | None, bool]:
    """One pass over ``messages``: :func:`first_user_end`, and whether any message is an
    assistant's (:attr:`PrefixChain.continued`)."""
    end: int | None = None
    user = assistant = False
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "assistant":
            assistant = True
            if user:
                break
        elif role == "user" and not user:
            user = True
            end = _content_end(text, msg.get("content"))
            if assistant:
                break
    return end, assistant


def _content_end(text: str, content: Any) -> int | None:
    if not isinstance(content, str):  # a str first: one isinstance for plain content
        content = "" if not isinstance(content, list) else " ".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text"))
    needle = content.strip()
    if not needle:
        return None
    at = text.find(needle) if len(needle) <= 64 else _find(text, needle)
    return None if at < 0 else at + len(needle)


def _find(text: str, needle: str) -> int:
    """``text.find(needle)``, faster for a long needle (characters): ``str.find`` preprocesses
    the whole needle (~7 us for 8k characters), so this finds its first 64 characters and
    compares the rest there (~0.5 us); after a few such places that do not match, ``str.find``
    from the last one (a bounded worst case)."""
    if len(needle) <= 64:
        return text.find(needle)
    head = needle[:64]
    at = text.find(head)
    for _ in range(4):
        if at < 0 or text.startswith(needle, at):
            return at
        at = text.find(head, at + 1)
    return at if at < 0 else text.find(needle, at)


def chain_for_request(rendered: Rendered, doc: dict[str, Any], kind: str, *, block_chars: int,
                      max_blocks: int, anchor_blocks: int, adapters: Collection[str] = ()) -> PrefixChain | None:
    """The chain of a request from its :class:`router.request.features.Rendered` prompt (no re-render).

    Chat: anchored at the first user message, ``continued`` when an assistant message is in
    the conversation. One text completion prompt: the first ``anchor_blocks`` blocks. Token-id
    prompts and batches of prompts: None (least load). ``adapters`` (the request's LoRA
    adapters) salt the chain (:func:`prefix_chain`).
    """
    texts: tuple[str, ...] = getattr(rendered, "texts", ())
    if len(texts) != 1:
        return None
    text = texts[0]
    end, continued = _scan_chat(text, doc.get("messages") or ()) if kind == "chat" else (None, False)
    return prefix_chain(text, block_chars, max_blocks, end, anchor_blocks, continued,
                        "\x1f".join(sorted(adapters)) if adapters else "")


class PrefixIndex:
    """Which block keys were last routed to which endpoint of one pool (approximate).

    Memory bound: at most ``max_blocks_per_endpoint`` keys per endpoint, and only endpoints
    passed to :meth:`record` since the last :meth:`retain` (about 100 bytes per key in CPython:
    the default 32,768 keys are ~3-4 MB per endpoint).

    Not thread-safe: call from the event loop only.

    Args:
        max_blocks_per_endpoint: LRU capacity per endpoint (blocks, > 0).
    """

    def __init__(self, *, max_blocks_per_endpoint: int) -> None:
        if max_blocks_per_endpoint < 1:
            raise ValueError("max_blocks_per_endpoint must be >= 1")
        self.max_blocks_per_endpoint = max_blocks_per_endpoint
        self._lru: dict[str, OrderedDict[int | tuple[str, int], None]] = {}

    def match(self, chain: PrefixChain, prompt_tokens: int) -> dict[str, int]:
        """``{url: estimated cached tokens}`` for each endpoint holding a prefix of ``chain``
        (endpoints with no match are left out). Read-only: nothing moves in the LRU.

        An endpoint holding exactly the anchor's whole blocks and the anchor's own key (a
        request with this very anchor went there: the first turn of this conversation, whose
        prompt often ends within a block of the anchor, e.g. 33 characters of template after
        the first user message) is estimated at the whole anchor, ``anchor_chars``: more than
        the anchor's whole blocks, so the next turn finds it (:func:`pick_endpoint`'s
        ``prefix_match``) instead of falling back to the rendezvous choice, which the load
        bound may have skipped for the first turn.
        """
        keys = chain.keys
        out: dict[str, int] = {}
        if not keys:
            return out
        whole, anchor_key = chain.anchor_blocks, chain.anchor_key
        for url, held in self._lru.items():
            if keys[0] not in held:
                continue
            lo, hi = 1, len(keys)  # keys[:lo] are held; find the largest such lo (prefix-closed)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if keys[mid - 1] in held:
                    lo = mid
                else:
                    hi = mid - 1
            if lo == whole and anchor_key is not None and anchor_key in held:
                out[url] = min(prompt_tokens, chain.anchor_chars * prompt_tokens // chain.chars)
            else:
                out[url] = chain.tokens(lo, prompt_tokens)
        return out

    def matched_blocks(self, url: str, chain: PrefixChain) -> int:
        """Blocks of ``chain`` held for ``url`` (a linear scan; for tests and diagnostics)."""
        held: Collection[int | tuple[str, int]] = self._lru.get(url, {})
        return next((i for i, key in enumerate(chain.keys) if key not in held), len(chain.keys))

    def record(self, url: str, chain: PrefixChain) -> None:
        """``chain`` was routed to ``url``: make its keys the most recent there (deepest
        first, so the prefix keys end up newest; the anchor's own key, when the anchor ends
        inside a block, before them all), then evict the oldest above the cap."""
        if not chain.keys:
            return
        held = self._lru.get(url)
        if held is None:
            held = self._lru[url] = OrderedDict()
        anchor_key = chain.anchor_key
        if anchor_key is not None:
            held[anchor_key] = None  # inserted, or kept in its place
            held.move_to_end(anchor_key)
        for key in reversed(chain.keys):
            if key in held:
                held.move_to_end(key)
            else:
                held[key] = None
        while len(held) > self.max_blocks_per_endpoint:
            held.popitem(last=False)

    def retain(self, urls: Collection[str]) -> list[str]:
        """Forget every endpoint not in ``urls`` (those that left the pool or are unhealthy);
        returns the URLs forgotten, sorted."""
        gone = sorted(u for u in self._lru if u not in urls)
        for url in gone:
            del self._lru[url]
        return gone

    def entries(self, url: str | None = None) -> int:
        """Keys held for ``url``, or over all endpoints (None)."""
        if url is not None:
            return len(self._lru.get(url, ()))
        return sum(len(v) for v in self._lru.values())

    def endpoints(self) -> list[str]:
        """Endpoints with at least one key, sorted."""
        return sorted(u for u, v in self._lru.items() if v)


class PrefixRequest(NamedTuple):
    """What :func:`router.decision.policy.decide` needs to call :func:`pick_endpoint` for a request (a
    named tuple, like :class:`PrefixChain`: one is built per decision, and a frozen dataclass
    of eight fields costs several times more to build).

    Attributes:
        anchor: the request's anchor (:attr:`PrefixChain.anchor`, or its integer hash), or None.
        anchor_tokens: the anchor's whole blocks in tokens (a match must exceed it).
        continued: :attr:`PrefixChain.continued`.
        cache_threshold, balance_abs_threshold, balance_rel_threshold, hash_load_factor: as
            :func:`pick_endpoint` (``routing.prefix_cache``).
        sticky_max_load: a ``prefix_match`` endpoint keeps its conversation across pools
            while its load is below this (requests; ``ceil(routing.prefix_cache.
            sticky_load_factor * routing.saturation.enter)``; 0: no affinity across pools).
        pool_affinity_ratio: a decision by prediction sends a continued conversation to the
            pool the anchor ranks first among those predicted within this factor of the best
            (``routing.prefix_cache.pool_affinity_ratio``, ratio; 1: the best always;
            :func:`router.decision.affinity.affine_order`).
        new_affinity_ratio: the same for a request that continues no conversation
            (``routing.prefix_cache.new_affinity_ratio``, ratio).
    """

    anchor: SupportsIndex | None
    anchor_tokens: int = 0
    continued: bool = False
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    hash_load_factor: float = 1.5
    sticky_max_load: int = 0
    pool_affinity_ratio: float = 1.0
    new_affinity_ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """One endpoint as :func:`pick_endpoint` sees it.

    Attributes:
        url: base URL.
        healthy: routable.
        load: requests running + queued (or in flight), as the policy measures load.
        cached_tokens: estimated prompt tokens already cached there (tokens; 0: none).
    """

    url: str
    healthy: bool
    load: int
    cached_tokens: int = 0


class EndpointLike(Protocol):
    """What :func:`pick_endpoint` reads of a candidate (:class:`Candidate`,
    :class:`router.decision.snapshot.EndpointSnapshot`); read-only attributes, same meaning as
    :class:`Candidate`'s."""

    @property
    def url(self) -> str: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def load(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...


def rendezvous_score(url: str, anchor: SupportsIndex) -> int:
    """The rendezvous weight of ``url`` for ``anchor`` (an :class:`Anchor` or its integer hash;
    the highest weight wins): BLAKE2b-64 of the URL keyed with the anchor, the same in every
    process (a keyed cryptographic hash: no structure shared by URLs that differ only in their
    port; ~1 us per endpoint)."""
    key = operator.index(anchor).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8, key=key).digest(), "big")


def pick_endpoint(candidates: Sequence[EndpointLike], *, prompt_tokens: int, anchor: SupportsIndex | None,
                  anchor_tokens: int = 0, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                  balance_rel_threshold: float = 1.5, hash_load_factor: float = 1.5,
                  exclude: Collection[str] = (), tie: int = 0,
                  continued: bool = False) -> tuple[str, PickReason] | None:
    """Choose the endpoint for one request inside a pool (see the module docstring).

    Args:
        candidates: the pool's endpoints, any order: :class:`Candidate` values or any objects
            with the same attributes (``url``, ``healthy``, ``load``, ``cached_tokens``).
        prompt_tokens: P, the prompt's length (tokens).
        anchor: the request's anchor (:attr:`PrefixChain.anchor`, or its integer hash), or None;
            its hash is read only to rank several endpoints.
        anchor_tokens: a match must exceed this (tokens) to count (0: any match).
        cache_threshold: a match must exceed this fraction of ``prompt_tokens`` (0-1).
        balance_abs_threshold: imbalance needs ``max - min`` load above this (requests).
        balance_rel_threshold: and ``max > this * min`` (ratio).
        hash_load_factor: a rendezvous choice keeps ``load + 1`` within this factor of the mean
            load plus one request, rounded up (ratio >= 1).
        exclude: URLs not to use (they failed this request).
        tie: per-request integer breaking least-load ties (``seed + request counter``).
        continued: the request continues a conversation (:attr:`PrefixChain.continued`): its
            rendezvous choice ignores ``hash_load_factor`` (only the load guard moves it), so a
            replica that did not see the earlier turns sends it where they most likely went.

    Returns:
        ``(url, reason)``, or None when no healthy endpoint is left. Never raises.
    """
    live = [c for c in candidates if c.healthy and c.url not in exclude]
    if not live:
        return None
    lo = hi = live[0].load
    best = total = 0
    for c in live:
        load = c.load
        total += load
        if load < lo:
            lo = load
        elif load > hi:
            hi = load
        best = max(best, c.cached_tokens)
    if hi - lo > balance_abs_threshold and hi > balance_rel_threshold * lo:
        return _least_load(live, lo, tie), PickReason.LOAD_GUARD
    if best > anchor_tokens and best > cache_threshold * prompt_tokens:
        top = [c for c in live if c.cached_tokens == best]
        if len(top) > 1:
            low = min(c.load for c in top)
            top = [c for c in top if c.load == low]
        if len(top) == 1:
            return top[0].url, PickReason.PREFIX_MATCH
        if anchor is None:
            return _least_load(top, top[0].load, tie), PickReason.PREFIX_MATCH
        return _highest(top, anchor), PickReason.PREFIX_MATCH
    if anchor is None:
        return _least_load(live, lo, tie), PickReason.LEAST_LOAD
    if len(live) > 1 and not continued:
        cap = math.ceil(hash_load_factor * (total + 1) / len(live))
        live = [c for c in live if c.load < cap or c.load == lo]
    return _highest(live, anchor), PickReason.RENDEZVOUS


def _highest(cands: Sequence[EndpointLike], anchor: SupportsIndex) -> str:
    if len(cands) == 1:
        return cands[0].url
    key = operator.index(anchor)
    best_url, best = "", -1
    for c in cands:
        score = rendezvous_score(c.url, key)
        if score > best:
            best_url, best = c.url, score
    return best_url


def _least_load(cands: Sequence[EndpointLike], low: int, tie: int) -> str:
    ties = sorted(c.url for c in cands if c.load == low)
    if len(ties) == 1:
        return ties[0]
    return ties[tie % len(ties)]
