"""The package version, at the bottom of the layers so every layer may name it."""

__version__ = "0.1.0"
