"""Kubernetes adapter: watch cache, binder, status writers and the local control plane."""
