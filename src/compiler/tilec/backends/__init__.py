"""Backends: the interface (`Backend`, `Target`), the in-tree `cuda` backend, plugin discovery."""

from __future__ import annotations

from .base import Backend, Stage, StageContext, Target, front_end
from .registry import (
    ENTRY_POINT_GROUP,
    MANIFEST,
    BackendStatus,
    Plugin,
    Registry,
    registry_for,
    reset,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MANIFEST",
    "Backend",
    "BackendStatus",
    "Plugin",
    "Registry",
    "Stage",
    "StageContext",
    "Target",
    "front_end",
    "registry_for",
    "reset",
]
