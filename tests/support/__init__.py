"""Helpers of the project's own tests (not shipped)."""
