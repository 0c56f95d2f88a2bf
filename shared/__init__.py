"""Contracts shared by Heddle's services: settings, names, messages and pure logic."""
