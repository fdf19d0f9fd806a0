"""core: see DESIGN.md."""
