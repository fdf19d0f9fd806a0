"""attest: what is said about a build and who says it: SBOM, provenance, licences, image signatures, DSSE
envelopes, in-toto links and layouts, and reading them back (inspect).

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
