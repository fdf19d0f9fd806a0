"""plan: see DESIGN.md."""
