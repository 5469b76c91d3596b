"""``specgate plan --apply``: the split of N engines as the replicas of two Deployments.

The speculative and the plain pools run as two Deployments (the Helm chart's pool
Deployments); the planner reads and writes their replicas through the ``scale`` subresource
(``apps/v1`` ``deployments/{name}/scale``, the one the HPA uses), with the official
``kubernetes`` client, so its Role needs only ``get``/``patch``/``update`` on
``deployments/scale`` of those two names.

:meth:`PoolScaler.move` moves one engine: the pool that gives one is scaled down first, then
the other up, so the total never exceeds N (it is N - 1 between the two calls). The router's
discovery sees the pod leave its EndpointSlice and drains it (in-flight requests finish, new
ones go elsewhere; ``router.loops.discovery``, ``router.front.drain``); the new pod gets traffic once it is
ready and warmed (``health.warmup``). A floor per pool and the total N are checked before any
write: a move that would break either is refused (:class:`ScaleError`), as is a move while
the two Deployments do not hold N replicas together (someone else changed them).

Access: ``api_url`` (tests, a plain-HTTP fake API server) when given; in a pod the service
account (``KUBERNETES_SERVICE_HOST``); else the kubeconfig.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["PoolScaler", "ScaleError", "ScaleTargets"]

log = logging.getLogger("specgate.plan")


class ScaleError(RuntimeError):
    """A scale call failed, or the move would break the floors or the total."""


@dataclass(frozen=True)
class ScaleTargets:
    """The two Deployments (names in ``namespace``) and the rules of a move (engines).

    Attributes:
        speculative, plain: the Deployments' names.
        engines: N, the replicas the two hold together.
        floor_speculative, floor_plain: replicas each keeps at least.
    """

    namespace: str
    speculative: str
    plain: str
    engines: int
    floor_speculative: int = 0
    floor_plain: int = 0


def _api(api_url: str | None) -> Any:
    from kubernetes import client, config

    cfg = client.Configuration()
    if api_url:
        cfg.host = api_url.rstrip("/")
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(client_configuration=cfg)
    return client.AppsV1Api(client.ApiClient(cfg))


class PoolScaler:
    """Reads and moves the split (module docstring).

    Args:
        targets: the Deployments and the rules.
        api_url: the API server's URL (tests); None: in-cluster or kubeconfig.
        timeout_s: bound on each API call (s).
    """

    def __init__(self, targets: ScaleTargets, *, api_url: str | None = None, timeout_s: float = 10.0) -> None:
        self.targets = targets
        self.timeout_s = timeout_s
        self._apps = _api(api_url)

    def _get(self, name: str) -> int:
        try:
            scale = self._apps.read_namespaced_deployment_scale(name, self.targets.namespace,
                                                                _request_timeout=self.timeout_s)
        except Exception as exc:  # the client raises ApiException, urllib3 errors, OSError
            raise ScaleError(f"reading the scale of deployment {self.targets.namespace}/{name}: {exc}") from exc
        return int(scale.spec.replicas or 0)

    def _set(self, name: str, replicas: int) -> None:
        try:
            self._apps.patch_namespaced_deployment_scale(name, self.targets.namespace, {"spec": {"replicas": replicas}},
                                                         _request_timeout=self.timeout_s)
        except Exception as exc:
            raise ScaleError(f"scaling deployment {self.targets.namespace}/{name} to {replicas}: {exc}") from exc

    def split(self) -> tuple[int, int]:
        """``(speculative, plain)`` replicas now (the Deployments' ``spec.replicas``).

        Raises:
            ScaleError: a read failed.
        """
        return self._get(self.targets.speculative), self._get(self.targets.plain)

    def move(self, to_speculative: int) -> tuple[int, int]:
        """Move one engine to the speculative pool (``to_speculative`` 1) or to the plain pool
        (-1): the giver scaled down first, then the taker up; returns the new split.

        Raises:
            ScaleError: a read or write failed; the two do not hold N replicas; the giver
                would fall below its floor.
        """
        t = self.targets
        if to_speculative not in (1, -1):
            raise ScaleError(f"a move is one engine (+1 or -1), not {to_speculative}")
        spec, plain = self.split()
        if spec + plain != t.engines:
            raise ScaleError(f"the deployments hold {spec} + {plain} replicas, not the {t.engines} engines planned: "
                             "not moving")
        giver, taker = (t.plain, t.speculative) if to_speculative > 0 else (t.speculative, t.plain)
        have, floor = (plain, t.floor_plain) if to_speculative > 0 else (spec, t.floor_speculative)
        if have - 1 < floor:
            raise ScaleError(f"deployment {giver} would fall below its floor of {floor} replicas")
        self._set(giver, have - 1)
        self._set(taker, (spec if to_speculative > 0 else plain) + 1)
        after = (spec + to_speculative, plain - to_speculative)
        log.warning("plan: moved one engine from %s to %s: %d speculative + %d plain", giver, taker, *after)
        return after
