"""Content-addressed on-disk cache of compiled kernels.

One JSON file per key, written to a temp file and moved into place with
os.replace, so readers see either nothing or a whole entry. Each entry stores
the sha256 of its payload; an entry that does not match (truncated, edited,
bit-rotted) is reported as corrupt, removed and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FORMAT = 1
Status = Literal["hit", "miss", "corrupt", "disabled"]


def digest_json(obj: Any) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


@dataclass(frozen=True)
class Cache:
    root: Path
    enabled: bool = True

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> tuple[dict[str, Any] | None, Status]:
        if not self.enabled:
            return None, "disabled"
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None, "miss"
        except OSError:
            return None, "corrupt"
        try:
            entry = json.loads(raw)
            payload = entry["payload"]
            ok = (
                entry.get("format") == FORMAT
                and entry.get("key") == key
                and isinstance(payload, dict)
                and entry.get("digest") == digest_json(payload)
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            with contextlib.suppress(OSError):
                path.unlink()
            return None, "corrupt"
        return payload, "hit"

    def put(self, key: str, payload: dict[str, Any]) -> None:
        if not self.enabled:
            return
        path = self.path(key)
        entry = {"format": FORMAT, "key": key, "digest": digest_json(payload), "payload": payload}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(entry, f, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            # A cache that cannot be written only costs a recompile.
            return
