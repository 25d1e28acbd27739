"""Attach planning (library discovery), the collector loop and drop accounting."""
