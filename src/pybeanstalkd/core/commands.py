"""What each command does: the handlers Engine.command dispatches to
(after parsing), and a put's admission and its body's arrival."""
from __future__ import annotations

from . import protocol as P
from .job import JOB_OVERHEAD, RESERVED_OVERHEAD
from .protocol import NS, U64_MAX, name_ok
from .session import BITBUCKET, BODY, BUSY
from .stats import job_stats, server_stats, tube_stats


class Commands:
    """Engine's command handlers (a base class of Engine: they use its
    queue, counters and settings)."""

    def c_put(self, s, cmd, now):
        self.put(s, *cmd[1:], now)

    def put(self, s, pri, delay, ttr, size, clean, now):
        """put's command line; its body comes next (finish_put)."""
        if size > self.max_job_size:
            s.state = BITBUCKET
            s.need = size + 2
            s.skip_reply = P.JOB_TOO_BIG
            return
        if not clean:
            s.send(P.BAD_FORMAT)
            return
        if not s.producer:
            s.producer = True
            self.producer_ct += 1
        q = self.q
        if q.next_id > U64_MAX:
            self._ids_used_up(s, size)
            return
        cap = self.max_memory
        if cap is not None:  # inline: this is every put's path
            # (memory_used(), inline: len(q.jobs) is a call; and the bodies
            # in flight, this one's included)
            cost = size + 2 + JOB_OVERHEAD
            over = (q.body_bytes + self.inflight + cost
                    + (q.ready_ct + q.delayed_ct + q.buried_ct) * JOB_OVERHEAD
                    + q.reserved_ct * (JOB_OVERHEAD + RESERVED_OVERHEAD) > cap)
            if over is not self.at_cap:
                self._cap_crossed(over)
            if over:
                # As the reference when it cannot allocate a job: the body is
                # skipped, the reply is OUT_OF_MEMORY and no id is used up.
                s.state = BITBUCKET
                s.need = size + 2
                s.skip_reply = P.OUT_OF_MEMORY
                return
            self.inflight += cost
        # (ids come from the queue alone: one place hands them out)
        s.in_job = q.new_job(s.use, pri, delay, ttr if ttr > NS else NS, now)
        s.state = BODY
        s.need = size + 2

    def _ids_used_up(self, s, size: int):
        """Every job id up to 2**64 - 1 has been used (a binlog can hold such
        an id): puts are refused, as a put that cannot be logged is. The
        reference wraps to 0, and a record of id 0 reads as the end of its
        binlog file, which loses the jobs after it at the next start."""
        if not self.said_ids_used_up:
            self.said_ids_used_up = True
            self.log("put refused: job ids are used up (the last is %d)" % U64_MAX)
        s.state = BITBUCKET
        s.need = size + 2
        s.skip_reply = P.INTERNAL_ERROR

    def finish_put(self, s, body, now):
        j, s.in_job = s.in_job, None
        if self.max_memory is not None:
            self.inflight -= len(body) + JOB_OVERHEAD
        if body[-2:] != b"\r\n":
            s.send(P.EXPECTED_CRLF)
            return
        if self.verbose >= 2:
            self.log("<%d job %d" % (s.fd, j.id))
        if self.draining:
            s.send(P.DRAINING)
            return
        j.body = body
        if not self.q.store.reserve_put(j):
            s.send(P.OUT_OF_MEMORY)  # the disk is full; the id stays used
            return
        self.q.insert(j, now)
        s.send(b"INSERTED %d\r\n" % j.id)

    def _found(self, s, j):
        if j is None:
            s.send(P.NOT_FOUND)
        else:
            s.send_job(b"FOUND", j)

    def c_peek(self, s, cmd, now):
        self._found(s, self.q.jobs.get(cmd[1]))

    def c_peek_ready(self, s, cmd, now):
        self._found(s, self.q.ready_top(s.use))

    def c_peek_delayed(self, s, cmd, now):
        self._found(s, self.q.delayed_top(s.use))

    def c_peek_buried(self, s, cmd, now):
        self._found(s, self.q.buried_top(s.use))

    def _worker(self, s):
        if not s.worker:
            s.worker = True
            self.worker_ct += 1

    def c_reserve(self, s, cmd, now):
        self._worker(s)
        self.q.reserve(s, None, now)

    def c_reserve_timeout(self, s, cmd, now):
        self._worker(s)
        self.q.reserve(s, cmd[1] * NS, now)

    def c_reserve_job(self, s, cmd, now):
        if not self.q.reserve_job(s, cmd[1], now):
            s.send(P.NOT_FOUND)
            return
        self._worker(s)

    def c_delete(self, s, cmd, now):
        s.send(self.q.delete(s, cmd[1], now))

    def c_release(self, s, cmd, now):
        _, id_, pri, delay = cmd
        s.send(self.q.release(s, id_, pri, delay, now))

    def c_bury(self, s, cmd, now):
        s.send(self.q.bury(s, cmd[1], cmd[2], now))

    def c_kick(self, s, cmd, now):
        if not self.q.spawn(self._in_slices(s, self.q.kick(s.use, cmd[1], now),
                                            b"KICKED %d\r\n")):
            s.state = BUSY

    def c_kick_job(self, s, cmd, now):
        s.send(P.KICKED if self.q.kick_job(cmd[1], now) else P.NOT_FOUND)

    def c_touch(self, s, cmd, now):
        s.send(P.TOUCHED if self.q.touch(s, cmd[1], now) else P.NOT_FOUND)

    def c_stats(self, s, cmd, now):
        s.send(P.yaml_reply(server_stats(self.q, self.counts, self)))

    def c_stats_job(self, s, cmd, now):
        j = self.q.jobs.get(cmd[1])
        s.send(P.NOT_FOUND if j is None else P.yaml_reply(job_stats(j, now)))

    def c_stats_tube(self, s, cmd, now):
        t = self.q.tubes.get(cmd[1])
        s.send(P.NOT_FOUND if t is None else P.yaml_reply(tube_stats(t, now)))

    def c_list_tubes(self, s, cmd, now):
        s.send(P.yaml_list(t.name for t in self.q.tube_list))

    def c_list_tube_used(self, s, cmd, now):
        s.send(b"USING %s\r\n" % s.use.name)

    def c_list_tubes_watched(self, s, cmd, now):
        s.send(P.yaml_list(t.name for t in s.watch))

    def c_use(self, s, cmd, now):
        self.q.use(s, cmd[1])
        s.send(b"USING %s\r\n" % s.use.name)

    def c_watch(self, s, cmd, now):
        s.send(b"WATCHING %d\r\n" % self.q.watch(s, cmd[1]))

    def c_ignore(self, s, cmd, now):
        n = self.q.ignore(s, cmd[1])
        s.send(P.NOT_IGNORED if n is None else b"WATCHING %d\r\n" % n)

    def c_quit(self, s, cmd, now):
        s.closing = True

    def c_pause_tube(self, s, cmd, now):
        _, name, delay = cmd
        t = self.q.tubes.get(name) if name_ok(name) else False
        if t is False:
            s.send(P.BAD_FORMAT)  # counted already: the reference checks the name late
        elif t is None:
            s.send(P.NOT_FOUND)
        else:
            self.q.pause_tube(t, delay, now)
            s.send(P.PAUSED)

    def reauth(self, s, token: bytes):
        """`auth` again on an authenticated connection (beanstalkd-rs): the
        right token changes nothing, a wrong one closes the connection."""
        if self.auth.verify(token):
            s.send(b"AUTHENTICATED\r\n")
        else:
            s.send(b"UNAUTHORIZED\r\n")
            s.closing = True
