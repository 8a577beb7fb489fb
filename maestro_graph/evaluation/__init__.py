"""Evaluation: pair outcomes on training files, multi-policy evaluation runs, reports and plots."""
