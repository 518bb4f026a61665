"""Cross-cutting runtime pieces every layer uses: loop thread, deadlines, limits, dedup."""
