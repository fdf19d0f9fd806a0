"""fetch: see DESIGN.md."""
