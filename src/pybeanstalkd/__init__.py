"""pybeanstalkd: a beanstalkd-compatible work-queue server."""

__version__ = "0.1.0"
# The protocol version we are byte-compatible with; clients gate features on it.
BEANSTALKD_VERSION = "1.13"
