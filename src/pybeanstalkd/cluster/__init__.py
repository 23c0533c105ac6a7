"""Replication for high availability: loaded only with --cluster."""
