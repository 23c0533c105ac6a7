"""What a tagged job counts in (--extensions), a part of the tags' policy
(tagged.py): its con: key's jobs and limit, its grp: group's members, its
aft: group's count of the jobs naming it; counted at its put or at
recovery (register) and uncounted at its delete (forget), where the last
member's delete releases what its group holds (holding.py, the policy's
part that this one tells). The keys and groups are the tags' state's
(ExtState: cons, groups, aft_left)."""
from __future__ import annotations

from typing import TYPE_CHECKING, final

from . import hiding

if TYPE_CHECKING:
    from .holding import Holding
    from .job import Job
    from .puttags import Tags
    from .queue import Queue
    from .tags import ExtState, Group


@final
class Members:
    __slots__ = ("ext", "holding")

    def __init__(self, ext: ExtState, holding: Holding) -> None:
        self.ext = ext
        self.holding = holding  # (the policy's: a group's last delete releases its held jobs)

    def register(self, q: Queue, j: Job, tags: Tags) -> Group | None:
        """A tagged job's limit and groups (at its put or at recovery); the
        group its aft: names, if it names one."""
        ext = self.ext
        con = tags.con
        if con is not None:
            k = ext.con_key(con)
            k.jobs += 1
            if k.limit < tags.limit:
                k.limit = tags.limit
                if k.parked:
                    hiding.unpark(ext, q, k)  # (more room now)
        if tags.grp is not None:
            ext.group(tags.grp).members[j.id] = True
        if tags.aft is None:
            return None
        g = ext.group(tags.aft)
        g.afts += 1
        return g

    def forget(self, q: Queue, j: Job, tags: Tags, now: int) -> None:
        """Tagged job j is deleted: it counts no more in its key or groups;
        if it was its grp: group's last member, the group releases what it
        holds."""
        ext = self.ext
        con = tags.con
        if con is not None:
            k = ext.con(con)
            assert k is not None  # (its job is live)
            k.jobs -= 1
            if not k.jobs:
                # Its last job: what the key kept goes with it (tuber keeps
                # the limit until a reservation of the key ends, which a
                # key whose jobs are never reserved never sees).
                k.parked.clear()  # (stale entries only, by now)
                if not k.held:
                    ext.forget_con(con)
        aft = tags.aft
        if aft is not None:
            g = ext.groups.get(aft)
            self.holding.dropped(j.id, aft, g)
            if g is None:
                ext.bump(ext.aft_left, aft, -1)
            else:
                g.afts -= 1
                if not g.afts and g.complete() and not g.waiting:
                    # Named by no job now, and no member left: tuber's empty
                    # entry would stay for ever (COMPATIBILITY.md).
                    ext.forget_group(aft)
        if tags.grp is not None:
            g = ext.groups.get(tags.grp)
            if g is not None:
                g.members.pop(j.id)
                self.holding.group_done(q, tags.grp, now)
