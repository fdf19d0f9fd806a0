"""verify: see DESIGN.md."""
