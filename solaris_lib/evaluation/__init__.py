"""Evaluation: the metrics of DESIGN.md, defined once and reused by every stage and report."""
