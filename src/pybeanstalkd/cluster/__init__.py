"""Replication for high availability (issue 13): loaded only with --cluster."""
