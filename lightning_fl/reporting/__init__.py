"""Reporting: figures for TensorBoard and tables for the terminal and files (no math, no state)."""
