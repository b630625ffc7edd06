"""Metrics of docs/design.md, defined once and reused by every stage and report: click
prediction (``metrics``: log-loss, AUC), speculation quality (``speculation``), serving quality
(``serving``), paired bootstrap intervals (``bootstrap``) and plots."""
