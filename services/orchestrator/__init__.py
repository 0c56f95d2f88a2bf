"""Heddle's orchestrator service."""
