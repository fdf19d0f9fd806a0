"""model: see DESIGN.md."""
