"""Conformance kit for policy authors (placeholder, being written)."""
