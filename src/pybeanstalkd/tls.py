"""TLS for --tls-cert/--tls-key (and mTLS with --tls-client-ca): the
client port's (server/) and the replication links' (cluster/).

Imported only when those flags are given: loading ssl costs time the
server does not have before it must be listening.
"""
from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .settings import Settings

HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and stalls loses its slot


class TlsError(Exception):
    pass


class Certs:
    """The contexts of --tls-cert/--tls-key/--tls-client-ca, for the client
    port and, with --cluster, both ends of the replication links. Each
    handshake asks for them, so new files are in use within a second of
    being written (reload.py); TlsError at start."""

    def __init__(self, cert: str, key: str, ca: str | None, peer: bool, warn, log=None):
        from .reload import Reloading

        def build():
            return (server_context(cert, key, ca),
                    peer_client_context(cert, key, ca) if peer else None)
        self.files = Reloading([cert, key, ca], build, TlsError, warn, log)

    def server(self) -> ssl.SSLContext:
        return self.files.current()[0]

    def peer(self) -> ssl.SSLContext:
        """A cluster leader's side of a link (peer=True only)."""
        return self.files.current()[1]


def server_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    ctx = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key, client_ca)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def peer_client_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """A cluster leader's side of its replication links (--cluster with
    --tls-cert): it shows the node's certificate, and with --tls-client-ca
    checks the follower's against that CA. Not its name: a node is reached
    at whatever address it registered, and the CA signs only nodes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    _load(ctx, cert, key, ca)
    if ca is None:
        ctx.verify_mode = ssl.CERT_NONE  # encrypted; the link's HMAC proves the leader
    return ctx


def _load(ctx: ssl.SSLContext, cert: str, key: str, ca: str | None) -> ssl.SSLContext:
    """TLS 1.2+, the certificate and key, and the CA's certificates if given."""
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(f"--tls-cert {cert} / --tls-key {key}: {_reason(e)}") from None
    if ca is not None:
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"--tls-client-ca {ca}: {_reason(e)}") from None
    return ctx


def _reason(e: Exception) -> str:
    return getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)


def describe(settings: Settings) -> str:
    """The -V start-up line."""
    if settings.tls_client_ca is not None:
        return (f"tls: certificate {settings.tls_cert}; client certificates required, "
                f"signed by {settings.tls_client_ca}")
    return f"tls: certificate {settings.tls_cert}; no client certificates"


def failure_reason(exc: BaseException | None) -> str:
    """A short reason for a failed handshake, for the -V log line."""
    if exc is None:
        return "closed"
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.__class__.__name__
    if isinstance(exc, TimeoutError):
        return "handshake timed out"
    return getattr(exc, "strerror", None) or exc.__class__.__name__
