"""The server's settings: what its flags say, resolved once by cli.py and
passed to what needs them, never changed afterwards: each attribute is
Final, so mypy refuses an assignment outside __init__, and one made at run
time raises (_Values.__setattr__). Values only: the files
they name (the TLS certificates, the token file) are loaded into
server/runtime.py's Runtime, with the sockets made at start-up.

Imports nothing: cli.py binds the port with this module and socket alone
loaded, so that a client connecting right after the exec (a test harness
that sleeps 100 ms) finds it listening; typing alone would cost 15 ms more.
"""
from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Final

JOB_DATA_SIZE_LIMIT_DEFAULT = 65535
JOB_DATA_SIZE_LIMIT_MAX = 1073741824
DEFAULT_PORT = "11300"
DEFAULT_FILESIZE = 10485760
DEFAULT_FSYNC_MS = 50
HTTP_MAX_CONNECTIONS_DEFAULT = 64  # (ops/httpguard.py's MAX_CONNECTIONS)
# --body-ram-min's default: with --bodies-on-disk, smaller bodies stay in
# RAM (docs/BODIES-ON-DISK.md: what a body left in the binlog saves and
# costs, measured).
BODY_RAM_MIN_DEFAULT = 1024


class _Values:
    """Equality, repr and a dict of the values, for plain classes of
    settings, and their freezing: each value is set once, by __init__."""

    # The values computed once from the others by __init__, not given to
    # it: left out of as_dict(), which gives what __init__ takes.
    derived: ClassVar[tuple[str, ...]] = ()

    if not TYPE_CHECKING:  # (hidden from mypy, which would then allow any name)
        def __setattr__(self, name, value):
            if name in self.__dict__:
                raise AttributeError(f"{type(self).__name__}.{name} is set once, by __init__")
            object.__setattr__(self, name, value)

        def __delattr__(self, name):
            raise AttributeError(f"{type(self).__name__}.{name} is set once, by __init__")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash(tuple(vars(self).items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    def as_dict(self) -> dict[str, Any]:
        """The values __init__ takes, by name."""
        return {k: v for k, v in vars(self).items() if k not in self.derived}


class ClusterSettings(_Values):
    """What a cluster node needs of the settings (--cluster), and no more."""

    def __init__(self, name: str, etcd: str, node: str, peer_listen: str, peer_advertise: str | None,
                 http: tuple[str, int] | None, fsync_each_write: bool) -> None:
        self.name: Final = name  # --cluster NAME
        self.etcd: Final = etcd  # HOST:PORT[,HOST:PORT...]
        self.node: Final = node
        self.peer_listen: Final = peer_listen  # HOST:PORT
        self.peer_advertise: Final = peer_advertise
        self.http: Final = http  # --http: where the others read this node's reports
        self.fsync_each_write: Final = fsync_each_write  # -f0: a follower acks what is fsynced


class Settings(_Values):
    """Every flag's value; Settings() is what no flag gives."""

    derived = ("fsync_each_write",)

    def __init__(
        self, *,
        port: str = DEFAULT_PORT,
        addr: str | None = None,
        max_job_size: int = JOB_DATA_SIZE_LIMIT_DEFAULT,
        # Not None means "-b was given" (the reference's wal.use), even if it is "".
        wal_dir: str | None = None,
        # A C int in the reference: "-s 4294967297" means 1.
        filesize: int = DEFAULT_FILESIZE,
        wantsync: bool = True,
        # An int64 in the reference: "-f -1" means -1.
        syncrate_ms: int = DEFAULT_FSYNC_MS,
        user: str | None = None,
        verbose: int = 0,
        # Our long options; each is off unless given.
        max_memory: int | None = None,
        max_connections: int | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
        auth_tokens_file: str | None = None,
        http: tuple[str, int] | None = None,  # --http: (host, port)
        http_auth: tuple[str, str] | None = None,  # --http-auth: (user, password)
        http_max_connections: int = HTTP_MAX_CONNECTIONS_DEFAULT,
        http_allowed_hosts: tuple[str, ...] = (),  # --http-allowed-hosts (cli._parse_host_names)
        cluster: str | None = None,  # --cluster NAME: replication
        etcd: str | None = None,  # HOST:PORT[,HOST:PORT...]
        node: str | None = None,
        peer_listen: str | None = None,  # HOST:PORT
        peer_advertise: str | None = None,
        # --extensions: tuber's protocol extensions (off: every reply as 1.13's)
        extensions: bool = False,
        max_tries: int | None = None,  # --max-tries N: bury a job at its Nth release or TTR expiry
        # --bodies-on-disk (needs -b): bodies of --body-ram-min bytes or more
        # are read back from the binlog instead of kept in RAM
        bodies_on_disk: bool = False,
        body_ram_min: int = BODY_RAM_MIN_DEFAULT,
    ) -> None:
        self.port: Final = port
        self.addr: Final = addr
        self.max_job_size: Final = max_job_size
        self.wal_dir: Final = wal_dir
        self.filesize: Final = filesize
        self.wantsync: Final = wantsync
        self.syncrate_ms: Final = syncrate_ms
        self.user: Final = user
        self.verbose: Final = verbose
        self.max_memory: Final = max_memory
        self.max_connections: Final = max_connections
        self.tls_cert: Final = tls_cert
        self.tls_key: Final = tls_key
        self.tls_client_ca: Final = tls_client_ca
        self.auth_tokens_file: Final = auth_tokens_file
        self.http: Final = http
        self.http_auth: Final = http_auth
        self.http_max_connections: Final = http_max_connections
        self.http_allowed_hosts: Final = http_allowed_hosts
        self.cluster: Final = cluster
        self.etcd: Final = etcd
        self.node: Final = node
        self.peer_listen: Final = peer_listen
        self.peer_advertise: Final = peer_advertise
        self.extensions: Final = extensions
        self.max_tries: Final = max_tries
        self.bodies_on_disk: Final = bodies_on_disk
        self.body_ram_min: Final = body_ram_min
        # -f0, "always fsync": a write is fsynced before its reply goes out
        # (and, in a cluster, before this node acks it).
        self.fsync_each_write: Final = wantsync and syncrate_ms == 0

    def cluster_settings(self) -> ClusterSettings:
        """What a cluster node needs (with --cluster: cli.py checked that
        --etcd, --node and --peer-listen come with it)."""
        assert (self.cluster is not None and self.etcd is not None and self.node is not None
                and self.peer_listen is not None)
        return ClusterSettings(self.cluster, self.etcd, self.node, self.peer_listen,
                               self.peer_advertise, self.http, self.fsync_each_write)
