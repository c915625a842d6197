"""Kubernetes plumbing shared by every component: client, informers, work queue, leader election, HTTP server, certificates, KAI's API names."""
