"""Heddle's services: gateway, orchestrator, dispatcher and runner agent."""
