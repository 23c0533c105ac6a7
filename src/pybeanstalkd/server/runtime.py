"""What the server holds besides its settings: the files the settings name,
loaded (the TLS certificates, the tokens), and the sockets made at start-up
(the HTTP side's). cli.py makes it once, and hands it to serve() beside the
settings; nothing changes it afterwards (the files reload themselves)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

    from ..tls import Certs
    from .auth import TokenFile


class Runtime:
    __slots__ = ("certs", "tokens", "http_sock")

    def __init__(self, certs: Certs | None = None, tokens: TokenFile | None = None,
                 http_sock: socket.socket | None = None) -> None:
        self.certs = certs  # --tls-cert/--tls-key (--tls-client-ca)
        self.tokens = tokens  # --auth-tokens
        self.http_sock = http_sock  # --http: the HTTP side's listening socket
