"""A fake Kubernetes API server for EndpointSlices (list + watch) and Deployments' scale, on 127.0.0.1 (aiohttp).

Speaks what the router's reflector uses:

- ``GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=a=b,c=d``:
  an ``EndpointSliceList`` with ``metadata.resourceVersion`` (the store's current version).
- the same with ``watch=true&resourceVersion=R[&timeoutSeconds=T][&allowWatchBookmarks=true]``:
  a chunked JSON-lines stream of ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}``.
  Events after ``R`` still in the history are replayed first, then live ones follow; the stream
  ends after ``T`` seconds. A ``R`` older than the compaction point gets one ``ERROR`` event
  with a 410 ``Status`` (``reason: Expired``), as the real API server sends, then the end.
  ``resourceVersion`` is a decimal counter shared by all objects (etcd's revision).

- ``GET``/``PATCH``/``PUT /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``: an
  ``autoscaling/v1`` ``Scale`` of a Deployment set with :meth:`set_replicas` (404 ``Status``
  for another); a PATCH takes a merge patch ``{"spec": {"replicas": n}}`` or a JSON patch
  replacing ``/spec/replicas``. Every write is appended to ``scale_writes`` as ``(name, replicas)``
  and handed to each of ``scale_listeners`` as ``(namespace, name, replicas)`` (on the server's
  thread: a listener only queues; :class:`tests.support.kube_controller.Controller` follows them).

Control (thread-safe, from the test): :meth:`apply`, :meth:`delete`, :meth:`expire` (end every
watch and forget the history, optionally after changes no watcher sees), :meth:`drop` (abort
every watch connection mid-stream, optionally after unseen changes), :meth:`apply_unseen` (a
change no watcher is told of and no history replays: a lost event), :meth:`gone_next` (answer
the next watches with 410), :meth:`bookmark`, :meth:`stop` and :meth:`start` again on the same
port (a restart, history lost), plus counters ``lists`` and ``watches``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["FakeKubeAPI", "endpoint_slice"]


def _conditions(state: bool | dict[str, bool]) -> dict[str, bool]:
    if isinstance(state, dict):
        return {"ready": False, "serving": False, "terminating": False, **state}
    return {"ready": state, "serving": state, "terminating": False}


def endpoint_slice(name: str, labels: dict[str, str], pods: dict[str, bool | dict[str, bool]], *,
                   port: int, namespace: str = "default") -> dict[str, Any]:
    """An EndpointSlice object: ``pods`` maps an IPv4 address to its ready condition, or to
    its conditions (``{"serving": True, "terminating": True}``; missing ones are false)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": _conditions(state)}
                      for ip, state in pods.items()],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


class _Watcher:
    def __init__(self, namespace: str, selector: str, request: web.Request) -> None:
        self.namespace = namespace
        self.selector = selector
        self.request = request
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def wants(self, obj: dict[str, Any]) -> bool:
        md = obj["metadata"]
        return md["namespace"] == self.namespace and _matches(self.selector, md.get("labels") or {})


class FakeKubeAPI:
    """See the module docstring. ``base_url`` once started."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.base_url = ""
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 100
        self.compacted = 100
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.watchers: set[_Watcher] = set()
        self.lists = 0
        self.watches = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._lose_history = False
        self._gone = 0
        self.deployments: dict[tuple[str, str], int] = {}  # (namespace, name) -> spec.replicas
        self.scale_writes: list[tuple[str, int]] = []
        self.scale_listeners: list[Callable[[str, str, int], None]] = []

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeKubeAPI:
        """Serve on 127.0.0.1 (the same port as before after a :meth:`stop`)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="fake-kube", daemon=True)
            self._thread.start()
        self._call(self._start)
        return self

    async def _start(self) -> None:
        if self._lose_history:  # a restarted API server's watch cache starts at the current version
            self._compact()
            self._lose_history = False
        app = web.Application()
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", self._handle)
        scale = "/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale"
        app.router.add_get(scale, self._scale)
        app.router.add_patch(scale, self._scale)
        app.router.add_put(scale, self._scale)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{self.port}"

    def stop(self, *, lose_history: bool = True) -> None:
        """Stop serving (connections closed, port freed); the store is kept. A later
        :meth:`start` is an API-server restart: with ``lose_history`` old versions answer 410."""
        self._call(self._stop, lose_history)

    async def _stop(self, lose_history: bool) -> None:
        self._end_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._lose_history = lose_history

    def close(self) -> None:
        """Stop for good (thread and loop)."""
        if self._loop is None:
            return
        if self._runner is not None:
            self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(5)
        self._loop.close()
        self._loop = None

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._loop is not None

        async def go() -> Any:
            out = fn(*args)
            if asyncio.iscoroutine(out):
                out = await out
            return out

        return asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)

    # -- store ----------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> int:
        """Create or replace an object (ADDED/MODIFIED to matching watchers); returns its rv."""
        return int(self._call(self._apply, copy.deepcopy(obj), True))

    def delete(self, name: str, namespace: str = "default") -> int:
        """Delete an object (DELETED to matching watchers); returns the new rv."""
        return int(self._call(self._delete, namespace, name, True))

    def expire(self, *changes: dict[str, Any] | tuple[str, str]) -> None:
        """End every watch, apply ``changes`` unseen (an object to apply, or ``(namespace,
        name)`` to delete), then forget the history: a watch from any earlier version gets 410."""

        def go() -> None:
            self._end_watches()
            for change in changes:
                if isinstance(change, tuple):
                    self._delete(change[0], change[1], False)
                else:
                    self._apply(copy.deepcopy(change), False)
            self._compact()

        self._call(go)

    def drop(self, *changes: dict[str, Any] | tuple[str, str]) -> None:
        """Abort every watch connection (no end of the chunked body, as a dropped stream),
        then apply ``changes`` (as :meth:`expire` takes them) unseen; the history is kept."""

        def go() -> None:
            for w in list(self.watchers):
                transport = w.request.transport
                if transport is not None:
                    transport.abort()
                w.queue.put_nowait(None)  # and end its handler
            self.watchers.clear()
            for change in changes:
                if isinstance(change, tuple):
                    self._delete(change[0], change[1], False)
                else:
                    self._apply(copy.deepcopy(change), False)

        self._call(go)

    def apply_unseen(self, obj: dict[str, Any]) -> int:
        """Create or replace an object without telling any watcher and without history: an
        event lost on the way (only a list shows it); returns its rv."""

        def go() -> int:
            rv = self._apply(copy.deepcopy(obj), False)
            self.history.pop()
            return rv

        return int(self._call(go))

    def gone_next(self, n: int = 1) -> None:
        """Answer the next ``n`` watch requests with the 410 ``Expired`` event, whatever
        their resourceVersion."""

        def go() -> None:
            self._gone += n

        self._call(go)

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current version to every watcher."""

        def go() -> None:
            for w in self.watchers:
                w.queue.put_nowait({"type": "BOOKMARK", "object": {
                    "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                    "metadata": {"resourceVersion": str(self.rv)}}})

        self._call(go)

    def _apply(self, obj: dict[str, Any], notify: bool) -> int:
        md = obj["metadata"]
        key = (md.get("namespace", "default"), md["name"])
        md["namespace"] = key[0]
        old = self.objects.get(key)
        kind = "MODIFIED" if old is not None else "ADDED"
        self.rv += 1
        md["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        self._record(kind, obj, notify, old)
        return self.rv

    def _delete(self, namespace: str, name: str, notify: bool) -> int:
        obj = self.objects.pop((namespace, name))
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._record("DELETED", obj, notify)
        return self.rv

    def _record(self, kind: str, obj: dict[str, Any], notify: bool,
                old: dict[str, Any] | None = None) -> None:
        """Log and send an event; an object that stops matching a watch's selector is sent
        to that watch as ``DELETED`` (as the API server's watch cache does)."""
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        if notify:
            for w in self.watchers:
                if w.wants(obj):
                    w.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
                elif old is not None and w.wants(old):
                    w.queue.put_nowait({"type": "DELETED", "object": copy.deepcopy(obj)})

    def _compact(self) -> None:
        self.compacted = self.rv
        self.history.clear()

    def _end_watches(self) -> None:
        for w in list(self.watchers):
            w.queue.put_nowait(None)
        self.watchers.clear()

    def set_replicas(self, name: str, replicas: int, namespace: str = "default") -> None:
        """Create a Deployment (for its scale subresource) or set its replicas, unlogged."""
        self._call(self.deployments.__setitem__, (namespace, name), replicas)

    # -- HTTP -----------------------------------------------------------------------------
    async def _scale(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.deployments:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                      "message": f'deployments.apps "{name}" not found', "code": 404}, status=404)
        if request.method != "GET":
            body = await request.json()
            if isinstance(body, list):  # a JSON patch
                replicas = next(op["value"] for op in body if op.get("path") == "/spec/replicas")
            else:
                replicas = body["spec"]["replicas"]
            self.deployments[(ns, name)] = int(replicas)
            self.scale_writes.append((name, int(replicas)))
            for listener in self.scale_listeners:
                listener(ns, name, int(replicas))
        n = self.deployments[(ns, name)]
        return web.json_response({"kind": "Scale", "apiVersion": "autoscaling/v1",
                                  "metadata": {"name": name, "namespace": ns, "resourceVersion": str(self.rv)},
                                  "spec": {"replicas": n}, "status": {"replicas": n, "selector": f"app={name}"}})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        q = request.query
        selector = q.get("labelSelector", "")
        if q.get("watch", "").lower() not in ("true", "1"):
            self.lists += 1
            items = [copy.deepcopy(o) for (n, _), o in sorted(self.objects.items())
                     if n == ns and _matches(selector, o["metadata"].get("labels") or {})]
            return web.json_response({"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                                      "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        self.watches += 1
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        since = int(q.get("resourceVersion") or self.rv)
        gone = self._gone > 0
        self._gone -= int(gone)
        if gone or since < self.compacted:
            await self._write(resp, {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"too old resource version: {since} ({self.compacted})",
                "reason": "Expired", "code": 410}})
            await resp.write_eof()
            return resp
        watcher = _Watcher(ns, selector, request)
        for rv, kind, obj in self.history:
            if rv > since and watcher.wants(obj):
                watcher.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
        self.watchers.add(watcher)
        timeout = float(q.get("timeoutSeconds") or 1800)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                if event is None:
                    break
                await self._write(resp, event)
            await resp.write_eof()
        except ConnectionResetError:
            pass
        finally:
            self.watchers.discard(watcher)
        return resp

    @staticmethod
    async def _write(resp: web.StreamResponse, event: dict[str, Any]) -> None:
        await resp.write(json.dumps(event).encode() + b"\n")
