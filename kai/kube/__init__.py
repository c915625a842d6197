"""Kubernetes plumbing shared by every component.

Client, informers, work queue, leader election, HTTP server, certificates and slim views.
"""
