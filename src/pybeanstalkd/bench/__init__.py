"""pybeanstalkd-bench: a load generator for any beanstalkd-protocol server. It talks to
servers over sockets only and imports nothing of the server's own packages."""
