"""A client-side history checker for the cluster's fault tests.

Clients record what they sent and what the cluster acknowledged; after a
fault, the survivors' jobs are checked against it:
- no acknowledged put is missing (unless a delete of it was sent);
- no acknowledged delete has come back;
- no job id names two different jobs (bodies are unique per put);
- no job appears that nobody put.
A put or delete whose reply never came is ambiguous: either outcome is
allowed, as after a crash of beanstalkd itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class History:
    acked: dict[int, bytes] = field(default_factory=dict)  # id -> body, put acknowledged
    sent: set[bytes] = field(default_factory=set)  # every body a put was sent with
    deleted: set[int] = field(default_factory=set)  # delete acknowledged
    delete_sent: set[int] = field(default_factory=set)  # delete sent, acknowledged or not
    problems: list[str] = field(default_factory=list)

    def put_sent(self, body: bytes):
        self.sent.add(body)

    def put_acked(self, id_: int, body: bytes):
        self._same_job(id_, body, "INSERTED")
        self.acked[id_] = body

    def reserved(self, id_: int, body: bytes):
        """A reserve handed out job id_ with this body."""
        self._same_job(id_, body, "RESERVED")
        if body not in self.sent:
            self.problems.append(f"job {id_}: reserved with a body nobody put: {body[:40]!r}")

    def send_delete(self, id_: int):
        self.delete_sent.add(id_)

    def delete_acked(self, id_: int):
        self.deleted.add(id_)

    def _same_job(self, id_: int, body: bytes, what: str):
        had = self.acked.get(id_)
        if had is not None and had != body:
            self.problems.append(f"job {id_}: {what} with {body[:40]!r}, but it was put as "
                                 f"{had[:40]!r}: one id, two jobs")

    def check(self, jobs: dict[int, bytes]) -> list[str]:
        """Problems with a survivor's jobs (id -> body), and any seen before."""
        out = list(self.problems)
        for id_ in self.acked:
            if id_ not in jobs and id_ not in self.delete_sent:
                out.append(f"job {id_}: acknowledged put is missing")
        for id_ in self.deleted:
            if id_ in jobs:
                out.append(f"job {id_}: acknowledged delete has come back")
        for id_, body in jobs.items():
            had = self.acked.get(id_)
            if had is not None and had != body:
                out.append(f"job {id_}: holds {body[:40]!r}, but it was put as {had[:40]!r}")
            elif had is None and body not in self.sent:
                out.append(f"job {id_}: nobody put it: {body[:40]!r}")
        return out
