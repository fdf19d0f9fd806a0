"""attest: see DESIGN.md."""
