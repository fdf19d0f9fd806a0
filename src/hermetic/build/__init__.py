"""build: see DESIGN.md."""
