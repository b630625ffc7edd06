"""Metrics of docs/design.md, defined once and reused by every stage and report: speculation
quality (``speculation``), serving quality (``serving``) and plots."""
