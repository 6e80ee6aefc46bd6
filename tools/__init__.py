"""Maintenance scripts for the repository (not part of the installed package)."""
