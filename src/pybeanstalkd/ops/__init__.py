"""The operator's side: the HTTP endpoints (metrics, health, JSON API,
dashboard), imported by server/ only with --http; and pybeanstalkd-admin,
which speaks only the protocol and imports nothing else of ours."""
