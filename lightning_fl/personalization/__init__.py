"""Personalization: each client's own model part, and the protocol that says which model is evaluated.

docs/algorithms.md, Personalization; docs/personalization.md.
"""
