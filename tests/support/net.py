"""Ports: the same chooser the servers of serving/ use (below the kernel's ephemeral range)."""

from __future__ import annotations

from serving.ports import free_port

__all__ = ["free_port"]
