"""Benchmarks: ratios measured side by side in one run; each runs as `python3 -m bench.NAME` from the checkout."""
