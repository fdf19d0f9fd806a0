"""plan: the typed plan of `hermetic all` (steps that decide run, done, skip or pull from one context, then
run in order), substitution from a registry, and bundles.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
