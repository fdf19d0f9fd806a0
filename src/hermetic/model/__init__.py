"""model: plain value types read from the checkout or written as records (settings, recipes, records,
toolchains, pinned requirements, wheel recipes); imports only core.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
