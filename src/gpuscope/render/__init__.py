"""Renderers: turn core results into text. They never compute statistics."""
