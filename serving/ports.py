"""Local TCP ports for servers started on this machine (tests, the demo, benchmarks).

A port taken from the kernel with ``bind(port 0)`` lies in the *ephemeral* range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on Linux), the same range the kernel
draws from for every outgoing connection. Between picking such a port and the server binding it
(an SGLang server binds its HTTP port only after loading its tokenizer, 20 s on a busy 2-core
machine), any client connection anywhere on the machine may be given that port as its source
port, and the server then fails with ``[Errno 98] address already in use``. :func:`free_port`
picks below that range instead, where the kernel never assigns ports on its own, and checks
that nothing is bound there.

See ``ip(7)`` (``ip_local_port_range``) and ``bind(2)``.
No module-level state.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["PORT_RANGE_FLOOR", "ephemeral_port_range", "free_port"]

#: The lowest port :func:`free_port` hands out (above the well-known and most registered
#: service ports a developer machine runs).
PORT_RANGE_FLOOR = 20000

_LINUX_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_port_range(path: Path = _LINUX_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral port range ``(low, high)``, both inclusive.

    Read from ``path`` (two integers); ``(32768, 60999)``, Linux's default, when it cannot be
    read or parsed (another OS, a sandbox without ``/proc``).
    """
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(host: str = "127.0.0.1", *, rng: random.Random | None = None,
              attempts: int = 200) -> int:
    """A TCP port on ``host`` that nothing is bound to now and that the kernel will not hand
    to an outgoing connection: drawn at random between :data:`PORT_RANGE_FLOOR` and the port
    below the ephemeral range, and checked by binding it (no ``SO_REUSEADDR``, so a port with
    a connection in ``TIME_WAIT`` is skipped too).

    ``rng`` draws the candidates (default: a fresh ``random.SystemRandom``, so two processes
    that start together do not draw the same sequence). When the ephemeral range starts at or
    below the floor (a tuned kernel), falls back to ``bind(port 0)``. Raises OSError when
    ``host`` cannot be bound or ``attempts`` candidates were all taken.
    """
    low, _high = ephemeral_port_range()
    top = low - 1
    if top - PORT_RANGE_FLOOR < 1000:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    draw = rng or random.SystemRandom()
    for _ in range(attempts):
        port = draw.randint(PORT_RANGE_FLOOR, top)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port on {host} in {PORT_RANGE_FLOOR}-{top} after {attempts} tries")
