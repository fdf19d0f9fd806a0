"""fetch: the verified caches (release sources from URLs, mirrors or apt; the pruned subset; the pinned
toolchain; the wheelhouse; sdists), every file admitted by its sha256.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
