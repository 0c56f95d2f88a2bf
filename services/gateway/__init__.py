"""Heddle's gateway service."""
