"""The gateway's sender of run ends to notify targets (docs/notifications.md)."""
