"""A Deployment controller for the fake Kubernetes API: pods that follow each Deployment's replicas.

Each :class:`PoolSpec` is one Deployment whose pods are fake SGLang servers on their own loopback
address (``127.0.0.2``, ``127.0.0.3``, ...; never reused, as pod IPs) and one shared port, listed
in one EndpointSlice (``{deployment}-slice``) with the pool's labels. The controller is told of
every replicas write through the scale subresource
(:attr:`tests.support.fake_kube.FakeKubeAPI.scale_listeners`) and reconciles that pool, as the
ReplicaSet controller and the kubelet do (kubernetes.io docs, "Pod Lifecycle", termination of
pods; EndpointSlice conditions as kubernetes/kubernetes#92968 defines them):

- **scale up**: a new pod starts at once and is listed ``ready: false``; ``startup_s`` seconds
  later (the conversion: an engine restarted in the other mode and loaded) it turns ready.
- **scale down**: the victim (a pod not yet ready first, else the newest) is listed
  ``terminating`` (``serving: true``, ``ready: false``) at once and keeps serving; it stops (its
  server shut down, its endpoint taken out of the slice) once ``prestop(url)`` holds (a preStop
  hook: by default at once) and it has no request in flight (the fake's running jobs), or after
  ``grace_s`` whatever it holds (counted in ``killed``, with the requests it still held); ``drains``
  holds each victim's requests in flight when it turned terminating.

Every transition is appended to ``events`` as ``(pool, ip, what)`` (``created``, ``ready``,
``terminating``, ``stopped``) under one lock; :meth:`Controller.wait_settled` waits (on a
condition, no sleep) until every pool holds its replicas, all ready, none terminating.
The waits inside the controller (startup, the stop's poll every ``poll_s``) are the cluster's
own time, not the test's.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from serving.fake_sglang import FakeServer
from tests.support.fake_kube import FakeKubeAPI, endpoint_slice

__all__ = ["Controller", "Pod", "PoolSpec"]

_STATES = {"starting": {"ready": False, "serving": False, "terminating": False},
           "ready": {"ready": True, "serving": True, "terminating": False},
           "terminating": {"ready": False, "serving": True, "terminating": True}}


@dataclass(frozen=True)
class PoolSpec:
    """One Deployment and its pods.

    Attributes:
        pool: the router pool's name (labels only); deployment: the Deployment's name.
        labels: the EndpointSlice's labels (the router's selector matches them).
        make_pod: starts a fake server on ``(ip, port)`` and returns it.
    """

    pool: str
    deployment: str
    labels: dict[str, str]
    make_pod: Callable[[str, int], FakeServer]


@dataclass
class Pod:
    """One pod: its address, server and state (``starting``, ``ready``, ``terminating``, ``stopped``)."""

    spec: PoolSpec
    ip: str
    server: FakeServer
    state: str = "starting"
    born: float = field(default_factory=time.monotonic)


def _inflight(server: FakeServer) -> int:
    return int(server.call(lambda st: len(st.jobs)))


class Controller:
    """See the module docstring.

    Args:
        api: the fake API server (Deployments created here with their initial replicas).
        pools: the Deployments.
        port: every pod's port.
        startup_s: seconds from a pod's start to ready; grace_s: the termination grace period.
        prestop: ``prestop(url)`` true once the pod may stop (default: always).
    """

    def __init__(self, api: FakeKubeAPI, pools: list[PoolSpec], *, port: int, startup_s: float, grace_s: float,
                 prestop: Callable[[str], bool] | None = None, poll_s: float = 0.01,
                 namespace: str = "default") -> None:
        self.api, self.port, self.namespace = api, port, namespace
        self.pools = {p.deployment: p for p in pools}
        self.startup_s, self.grace_s, self.poll_s = startup_s, grace_s, poll_s
        self.prestop = prestop or (lambda _url: True)
        self.pods: list[Pod] = []
        self.events: list[tuple[str, str, str]] = []
        self.killed: list[tuple[str, int]] = []  # (ip, requests in flight) stopped at the grace period
        self.drains: list[tuple[str, int]] = []  # (ip, requests in flight) when it turned terminating
        self._next_ip = 2
        self._cond = threading.Condition()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._worker = threading.Thread(target=self._run, name="fake-controller", daemon=True)

    # -- public ---------------------------------------------------------------------------
    def start(self, replicas: dict[str, int]) -> Controller:
        """Create the Deployments with ``replicas`` (by name), their pods ready at once, and
        follow scale writes from now on."""
        for name, n in replicas.items():
            self.api.set_replicas(name, n, self.namespace)
            for _ in range(n):
                self._event(self._create(self.pools[name]), "ready")
            self._publish(self.pools[name])
        self.api.scale_listeners.append(self._on_scale)
        self._worker.start()
        return self

    def url(self, pod: Pod) -> str:
        return f"http://{pod.ip}:{self.port}"

    def live(self, pool: str, state: str = "ready") -> list[Pod]:
        """The pool's (router pool name) pods in ``state``."""
        with self._cond:
            return [p for p in self.pods if p.spec.pool == pool and p.state == state]

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Until every Deployment's replicas are ready pods and none is starting or terminating.

        Raises:
            AssertionError: not settled within ``timeout`` s.
        """
        def settled() -> bool:
            for name, spec in self.pools.items():
                want = self.api.deployments[(self.namespace, name)]
                pods = [p for p in self.pods if p.spec is spec and p.state != "stopped"]
                if len(pods) != want or any(p.state != "ready" for p in pods):
                    return False
            return self._queue.empty()

        with self._cond:
            if not self._cond.wait_for(settled, timeout):
                raise AssertionError(f"the pods did not settle within {timeout} s: "
                                     f"{[(p.ip, p.spec.pool, p.state) for p in self.pods]}")

    def close(self) -> None:
        """Stop following, and every pod's server."""
        self._closed.set()
        self._queue.put(None)
        if self._worker.is_alive():
            self._worker.join(10)
        for t in self._threads:
            t.join(10)
        for p in self.pods:
            p.server.stop(grace_s=0.5)

    # -- internals ------------------------------------------------------------------------
    def _on_scale(self, namespace: str, name: str, _replicas: int) -> None:
        if namespace == self.namespace and name in self.pools:
            self._queue.put(name)

    def _run(self) -> None:
        while (name := self._queue.get()) is not None:
            self._reconcile(self.pools[name])
            with self._cond:
                self._cond.notify_all()

    def _event(self, pod: Pod, what: str) -> None:
        with self._cond:
            if what != "created":
                pod.state = what
            self.events.append((pod.spec.pool, pod.ip, what))
            self._cond.notify_all()

    def _create(self, spec: PoolSpec) -> Pod:
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        pod = Pod(spec, ip, spec.make_pod(ip, self.port))
        with self._cond:
            self.pods.append(pod)
        self._event(pod, "created")
        return pod

    def _publish(self, spec: PoolSpec) -> None:
        with self._cond:
            pods: dict[str, bool | dict[str, bool]] = {p.ip: dict(_STATES[p.state]) for p in self.pods
                                                       if p.spec is spec and p.state != "stopped"}
        self.api.apply(endpoint_slice(f"{spec.deployment}-slice", spec.labels, pods,
                                      port=self.port, namespace=self.namespace))

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _reconcile(self, spec: PoolSpec) -> None:
        want = self.api.deployments[(self.namespace, spec.deployment)]
        with self._cond:
            alive = [p for p in self.pods if p.spec is spec and p.state in ("starting", "ready")]
        if len(alive) > want:
            # the ReplicaSet's choice: not-ready pods first, then the newest
            victims = sorted(alive, key=lambda p: (p.state == "ready", -p.born))[:len(alive) - want]
            for pod in victims:
                self._event(pod, "terminating")
                self.drains.append((pod.ip, _inflight(pod.server)))
            self._publish(spec)
            for pod in victims:
                self._spawn(self._terminate, pod)
        for _ in range(want - len(alive)):
            pod = self._create(spec)
            self._publish(spec)
            self._spawn(self._start, pod)

    def _start(self, pod: Pod) -> None:
        if self._closed.wait(self.startup_s):
            return
        self._event(pod, "ready")
        self._publish(pod.spec)

    def _terminate(self, pod: Pod) -> None:
        deadline = time.monotonic() + self.grace_s
        url = self.url(pod)
        while not (self.prestop(url) and _inflight(pod.server) == 0):
            if time.monotonic() >= deadline:
                with self._cond:
                    self.killed.append((pod.ip, _inflight(pod.server)))
                break
            if self._closed.wait(self.poll_s):
                return
        pod.server.stop(grace_s=0.5)
        self._event(pod, "stopped")
        self._publish(pod.spec)
