"""Example third-party model for probe (see docs/PLUGINS.md)."""
