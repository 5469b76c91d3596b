"""A radix prefix cache over token *runs*, as SGLang 0.5.23's ``RadixCache`` keeps its tree.

The second engine model (:mod:`loadtests.sglang_sched`) keeps its KV prefix cache as SGLang does
(``python/sglang/srt/mem_cache/radix_cache.py`` in sgl-project/sglang, page size 1):

- ``match`` (SGLang's ``match_prefix`` / ``_match_prefix_helper``): the longest cached prefix of
  a key, at most ``limit`` tokens; a match that ends inside a node splits it (``_split_node``);
  every node on the path has its access time refreshed;
- ``insert`` (``_insert_helper``): walks the matched part and adds the rest as one new node per
  run; returns how many tokens were already cached (the caller frees those duplicates);
- ``lock`` / ``unlock`` (``inc_lock_ref`` / ``dec_lock_ref``): a running request pins its
  prefix path; a pinned token is *protected*, an unpinned one *evictable*;
- ``evict`` (``evict``): whole evictable leaves in least-recently-used order, a parent joining the
  heap when it becomes an unpinned leaf, until at least the asked number of tokens is freed.

Tokens: the engine model is given token *counts*, not ids, so a sequence is a tuple of runs
``(owner, lo, hi)``: the tokens at positions ``lo..hi-1`` belong to ``owner`` and token ``i`` is
``(owner, i)``. Runs are contiguous from position 0, so two sequences share a prefix exactly
where their runs have the same owners; a node's children are keyed by the owner of their first
token (SGLang's ``child_key``). :func:`shared_runs` builds the engine's sequences: a prefix owned
by :data:`SHARED` (the prompt's shared part) and the rest by the request.

Access times are a counter (one tick per ``match``/``insert``), ties broken by node creation
order, so eviction is deterministic. No module state; errors: ``ValueError`` on an unlock
without a lock.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

__all__ = ["SHARED", "Node", "RadixCache", "Run", "shared_runs"]

#: ``(owner, lo, hi)``: the tokens ``(owner, i)`` for ``lo <= i < hi``.
Run = tuple[Hashable, int, int]

#: The owner of the prompt's shared prefix (the tokens every request with a shared part has).
SHARED = "shared"


def shared_runs(shared: int, owner: Hashable, length: int) -> tuple[Run, ...]:
    """A sequence of ``length`` tokens whose first ``min(shared, length)`` are :data:`SHARED`'s
    and the rest ``owner``'s."""
    s = max(0, min(shared, length))
    runs: list[Run] = []
    if s:
        runs.append((SHARED, 0, s))
    if length > s:
        runs.append((owner, s, length))
    return tuple(runs)


def _run_at(runs: Sequence[Run], pos: int) -> tuple[Hashable, int]:
    for owner, lo, hi in runs:
        if lo <= pos < hi:
            return owner, hi
    raise ValueError(f"position {pos} is past the sequence")


class Node:
    """A tree node: the tokens ``(owner, i)`` for ``lo <= i < hi``, its children by first owner,
    pins (``lock_ref``), last access tick and creation serial."""

    __slots__ = ("children", "hi", "last_access", "lo", "lock_ref", "owner", "parent", "serial")

    def __init__(self, owner: Hashable, lo: int, hi: int, parent: Node | None, serial: int) -> None:
        self.owner, self.lo, self.hi, self.parent, self.serial = owner, lo, hi, parent, serial
        self.children: dict[Hashable, Node] = {}
        self.lock_ref = 0
        self.last_access = 0

    def __len__(self) -> int:
        return self.hi - self.lo


class RadixCache:
    """The tree (module docstring). Attributes (tokens): ``total_size``, ``evictable_size``,
    ``protected_size`` (``total = evictable + protected``)."""

    def __init__(self) -> None:
        self._serial = 0
        self.root = Node(None, 0, 0, None, 0)
        self.root.lock_ref = 1
        self.total_size = 0
        self.evictable_size = 0
        self.protected_size = 0
        self._tick = 0

    def _new(self, owner: Hashable, lo: int, hi: int, parent: Node) -> Node:
        self._serial += 1
        node = Node(owner, lo, hi, parent, self._serial)
        node.last_access = self._tick
        parent.children[owner] = node
        return node

    def _split(self, child: Node, at: int) -> Node:
        """Cut ``child`` at position ``at``; returns the new upper part (SGLang's ``_split_node``)."""
        parent = child.parent
        assert parent is not None
        top = self._new(child.owner, child.lo, at, parent)
        top.lock_ref, top.last_access = child.lock_ref, child.last_access
        top.children[child.owner] = child
        child.lo, child.parent = at, top
        return top

    def match(self, runs: Sequence[Run], limit: int) -> tuple[int, Node]:
        """The cached prefix of ``runs`` up to ``limit`` tokens: (its length, its last node)."""
        self._tick += 1
        node, pos = self.root, 0
        while pos < limit:
            owner, run_hi = _run_at(runs, pos)
            child = node.children.get(owner)
            if child is None:
                break
            child.last_access = self._tick
            end = min(child.hi, run_hi, limit)
            if end < child.hi:
                node = self._split(child, end)
                pos = end
                break
            node, pos = child, child.hi
        return pos, node

    def insert(self, runs: Sequence[Run], length: int) -> tuple[int, Node]:
        """Insert the first ``length`` tokens of ``runs``: (tokens already cached, last node)."""
        self._tick += 1
        node, pos, already = self.root, 0, 0
        while pos < length:
            owner, run_hi = _run_at(runs, pos)
            end = min(run_hi, length)
            child = node.children.get(owner)
            if child is None:
                node = self._new(owner, pos, end, node)
                self.total_size += end - pos
                self.evictable_size += end - pos
                pos = end
                continue
            child.last_access = self._tick
            stop = min(child.hi, end)
            if stop < child.hi:
                child = self._split(child, stop)
            already += stop - pos
            node, pos = child, stop
        return already, node

    def lock(self, node: Node) -> None:
        """Pin the path from ``node`` to the root (``inc_lock_ref``)."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node)
                self.protected_size += len(node)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent

    def unlock(self, node: Node) -> None:
        """Release a pin taken by :meth:`lock` (``dec_lock_ref``).

        Raises:
            ValueError: a node on the path is not pinned.
        """
        while node is not self.root:
            if node.lock_ref <= 0:
                raise ValueError("unlock of a node that is not locked")
            if node.lock_ref == 1:
                self.evictable_size += len(node)
                self.protected_size -= len(node)
            node.lock_ref -= 1
            assert node.parent is not None
            node = node.parent

    def evict(self, tokens: int) -> int:
        """Free at least ``tokens`` evictable tokens if there are that many, least recently used
        leaves first; returns the tokens freed."""
        if tokens <= 0:
            return 0
        heap = []
        stack = [self.root]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if n is not self.root and not n.children and n.lock_ref == 0:
                heap.append((n.last_access, n.serial, n))
        heapq.heapify(heap)
        freed = 0
        while freed < tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.owner]
            freed += len(leaf)
            self.total_size -= len(leaf)
            self.evictable_size -= len(leaf)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.serial, parent))
        return freed
