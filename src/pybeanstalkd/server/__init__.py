"""The network side: listening sockets (TCP, UNIX, systemd), the asyncio/uvloop
transport that feeds the core, start-up and signals. The only place with an event loop."""
