"""The binlog: beanstalkd's v7 on-disk format (and v5 reading), the log files with their
space reservation and compaction, recovery at start-up, and the fsync thread. Never
imports the server."""
