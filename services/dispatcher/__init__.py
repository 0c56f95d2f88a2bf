"""Heddle's dispatcher service."""
