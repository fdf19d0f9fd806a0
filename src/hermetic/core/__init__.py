"""core: what every layer uses (errors with their exit classes, the log, digests, times, platforms, names,
staging); imports nothing of hermetic.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
