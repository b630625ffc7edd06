"""Metrics of DESIGN.md, defined once: speculation quality and serving quality."""
