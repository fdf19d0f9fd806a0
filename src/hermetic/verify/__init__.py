"""verify: rebuild an artifact from its record elsewhere, later, and compare; the report of what differs.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
