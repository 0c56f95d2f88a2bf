"""Heddle's runner_agent service."""
