"""The kernel cache, in one place: keys (`key`), bytes and files (`format`), kernels (`store`).

`tilec.cache` names the format's functions and the files' `Cache` as before; `Store` and `Key`
are imported from their modules (`tilec.cache.store`, `tilec.cache.key`), which need tilec's
kernel types, which need the format.
"""

from __future__ import annotations

from .format import (
    FORMAT,
    MAGIC,
    SHORTCUT_MAGIC,
    Cache,
    Entry,
    Head,
    Shortcut,
    Status,
    decode,
    decode_head,
    decode_shortcut,
    digest_bytes,
    digest_json,
    encode,
    encode_head,
    encode_shortcut,
    file_state,
    first_part,
    hot_length,
    rest_checked,
    same_state,
    unchanged,
)

__all__ = [
    "FORMAT",
    "MAGIC",
    "SHORTCUT_MAGIC",
    "Cache",
    "Entry",
    "Head",
    "Shortcut",
    "Status",
    "decode",
    "decode_head",
    "decode_shortcut",
    "digest_bytes",
    "digest_json",
    "encode",
    "encode_head",
    "encode_shortcut",
    "file_state",
    "first_part",
    "hot_length",
    "rest_checked",
    "same_state",
    "unchanged",
]
