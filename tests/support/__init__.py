"""Shared test harness (a package, never a conftest: import from here, not from a conftest).

One of each:

- :func:`free_port`: a free TCP port on 127.0.0.1 (:mod:`tests.support.net`).
- :func:`wait_until`: poll a predicate with a deadline (:mod:`tests.support.wait`).
- :func:`make_test_tokenizer`: a tiny deterministic HF tokenizer with a chat template
  (:mod:`tests.support.tokenizer`).
- :func:`router_config` / :func:`write_router_yaml`: the router YAML the tests start from
  (:mod:`tests.support.config`).
- :class:`RouterServer`: the real router app under uvicorn in a thread on 127.0.0.1, with
  :meth:`~RouterServer.wait_scrape_rounds` and :meth:`~RouterServer.wait_reloads` to wait on
  the router's own counters instead of sleeping (:mod:`tests.support.router`).
- :class:`~tests.support.transport.MockTransport`: the proxy's upstream without sockets, a
  handler per engine request (:mod:`tests.support.transport`).
- :func:`~tests.support.sse.split_sse` / :func:`~tests.support.sse.sse_events` /
  :func:`~tests.support.sse.words`: SGLang's SSE framing, checked (:mod:`tests.support.sse`).
"""

from tests.support.config import router_config, write_router_yaml
from tests.support.net import free_port
from tests.support.router import RouterServer
from tests.support.tokenizer import CHAT_TEMPLATE, make_test_tokenizer
from tests.support.wait import wait_until

__all__ = ["CHAT_TEMPLATE", "RouterServer", "free_port", "make_test_tokenizer", "router_config", "wait_until",
           "write_router_yaml"]
