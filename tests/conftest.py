"""Shared fixtures: the scheduler kernel on in-memory clusters (see ``kai.testing``)."""
