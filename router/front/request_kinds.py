"""The generation routes' differences, one object per kind: chat, completions, responses.

The request pipeline (:mod:`router.front.pipeline`) is the same for every generation route; what
differs is a few hooks, each a method or attribute of :class:`RequestKind`:

==================  ===================================  ======================================
hook                chat / completions                   responses (:mod:`router.front.responses`)
==================  ===================================  ======================================
``check_served``    always served                        404 unless a pool ``serves`` it
``parse``           :func:`~router.request.features.parse_chat`  :func:`~router.front.responses.parse_responses`
                    (with the model's media bounds) /
                    :func:`~router.request.features.parse_completions`
``engine_ids``      :func:`abort_rids` (``rid``)         :func:`~router.front.responses.responses_fields`
                                                         (``request_id``, ``max_output_tokens``)
``end_events``      None (``data: [DONE]``)              :data:`~router.front.responses.RESPONSES_END_EVENTS`
``observer``        a :class:`~router.upstream.observe.ResponseObserver`   None
``spec_stats``      True (:mod:`router.upstream.specstats`)       False
==================  ===================================  ======================================

The kinds hold no state (one frozen instance each, in :data:`KINDS`); a new generation route
is a subclass here, a member of :data:`KINDS` and its path in ``router.front.api.GENERATE_ROUTES``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from router.front.responses import (
    RESPONSES_END_EVENTS,
    check_served,
    parse_responses,
    responses_fields,
)
from router.request.parsing import ParsedRequest, parse_chat, parse_completions
from router.upstream.observe import ResponseObserver, wants_tools

if TYPE_CHECKING:
    from collections.abc import Mapping

    from router.config.tree import Config
    from router.ops.metrics import RouterMetrics
    from router.request.features import RequestFeatures
    from router.state.runtime import Runtime

__all__ = ["KINDS", "Chat", "Completions", "RequestKind", "Responses", "abort_rids"]


def abort_rids(doc: dict[str, Any], features: RequestFeatures, request_id: str,
               fields: dict[str, Any]) -> tuple[str, ...]:
    """The engine request ids that can stop a chat or completions request
    (:attr:`router.upstream.proxy_job.ProxyJob.abort_rids`).

    SGLang 0.5.23 names one prompt's request by its ``rid`` and a batch of prompts' by
    ``<rid>_<i>`` (or the client's list of rids); with ``n > 1`` it gives every sample a fresh
    id (``regenerate_rid``) that no abort can name, so nothing is returned (and no ``rid``
    added) then. Without a client ``rid``, ``specgate-<request id>`` is added to ``fields``, so
    a single prompt's response id is the router's request id.
    """
    if features.n != 1:
        return ()
    rid = doc.get("rid")
    if rid is None and "rid" not in doc:
        rid = fields["rid"] = f"specgate-{request_id}"
    if isinstance(rid, str):
        return (rid,) if features.num_prompts == 1 else tuple(f"{rid}_{i}" for i in range(features.num_prompts))
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        return tuple(rid)
    return ()


class RequestKind:
    """One generation route's hooks (see the module docstring); the defaults are chat's.

    Attributes:
        name: the kind (``chat``, ``completions``, ``responses``): the prefix chain's anchor
            rule (:func:`router.decision.prefix.chain_for_request`) reads it.
        end_events: SSE events of which one ends a complete stream; None: ``data: [DONE]``.
        spec_stats: a speculative engine may be asked for the request's own statistics.
    """

    __slots__ = ()
    name: ClassVar[str] = "chat"
    end_events: ClassVar[tuple[bytes, ...] | None] = None
    spec_stats: ClassVar[bool] = True

    def check_served(self, runtime: Runtime) -> None:
        """Raise before the body is read when this router does not serve the route."""

    def parse(self, doc: Any, config: Config) -> ParsedRequest:
        """Validate the request document (``limits.max_n``; the model's media bounds).

        Raises:
            InvalidRequest: on the first invalid field (``param`` names it).
        """
        return parse_chat(doc, max_n=config.limits.max_n, media=config.model.media_tokens)

    def engine_ids(self, doc: dict[str, Any], features: RequestFeatures, request_id: str,
                   fields: dict[str, Any]) -> tuple[str, ...]:
        """Add the kind's own engine fields to ``fields``; returns the abort ids."""
        return abort_rids(doc, features, request_id, fields)

    def observer(self, metrics: RouterMetrics, doc: dict[str, Any]) -> ResponseObserver | None:
        """What watches the relayed response (usage, endings); None: nothing."""
        return ResponseObserver(metrics, tools=wants_tools(doc))


class Chat(RequestKind):
    """``POST /v1/chat/completions``."""

    __slots__ = ()


class Completions(RequestKind):
    """``POST /v1/completions``: its own parser, otherwise chat's hooks."""

    __slots__ = ()
    name = "completions"

    def parse(self, doc: Any, config: Config) -> ParsedRequest:
        return parse_completions(doc, max_n=config.limits.max_n)


class Responses(RequestKind):
    """``POST /v1/responses`` (:mod:`router.front.responses`): opt-in, its own fields and end
    events, no observer and no speculative statistics."""

    __slots__ = ()
    name = "responses"
    end_events = RESPONSES_END_EVENTS
    spec_stats = False

    def check_served(self, runtime: Runtime) -> None:
        check_served(runtime)

    def parse(self, doc: Any, config: Config) -> ParsedRequest:
        return parse_responses(doc, max_n=config.limits.max_n)

    def engine_ids(self, doc: dict[str, Any], features: RequestFeatures, request_id: str,
                   fields: dict[str, Any]) -> tuple[str, ...]:
        return responses_fields(doc, features, request_id, fields)

    def observer(self, metrics: RouterMetrics, doc: dict[str, Any]) -> ResponseObserver | None:
        return None


#: Each generation kind by name (read-only).
KINDS: Mapping[str, RequestKind] = MappingProxyType({k.name: k for k in (Chat(), Completions(), Responses())})
