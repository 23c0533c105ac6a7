"""The JSON of /api/v1: stats, tubes and jobs as dicts, from the same field
lists as the protocol's YAML (core/stats.py), and the checks on what a
request sends. No I/O here."""
from __future__ import annotations

import base64
import binascii
import codecs
import re
from itertools import islice

from ..core.protocol import NS, name_ok
from ..core.stats import job_fields, server_fields, tube_fields

PREVIEW = 1024  # body bytes shown by a job's preview
MAX_LIMIT = 1000
U32 = (1 << 32) - 1
# Control characters other than tab, LF and CR (C0, DEL, C1): such a body is
# shown as hex only.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class BadRequest(Exception):
    """400, with this text."""


def _value(key: bytes, v):
    if v is True or v is False or type(v) is int:
        return v
    if key in (b"rusage-utime", b"rusage-stime"):
        return float(v)
    return v.decode("utf-8", "replace")  # Quoted or raw text


def as_dict(fields) -> dict:
    return {k.decode(): _value(k, v) for k, v in fields}


def stats(e) -> dict:
    """With --extensions, "held-jobs" too: aft: jobs held by their group,
    which no current-jobs-* count (as in tuber)."""
    q = e.q
    out = {"stats": as_dict(server_fields(q, e.counts, e)), "draining": bool(e.draining),
           "memory": {"used": q.memory_used(), "cap": e.max_memory}}
    if q.ext is not None:
        out["held-jobs"] = q.ext.nheld
    return out


def tube(t, now: int) -> dict:
    return as_dict(tube_fields(t, now))


def tube_tags(t, ext) -> dict:
    """With --extensions (ext: the queue's ExtState), what a tube's JSON
    has past its stats-tube: duplicate puts answered, aft: jobs held and
    jobs hidden by their concurrency key (/metrics' pybeanstalkd_tube_*)."""
    name = t.name
    return {"dedup-hits": ext.dedup.get(name, 0), "held-jobs": ext.held.get(name, 0),
            "blocked-jobs": ext.blocked.get(name, 0)}


def tube_json(t, now: int, ext) -> dict:
    d = tube(t, now)
    if ext is not None:
        d.update(tube_tags(t, ext))
    return d


TUBES_SLICE = 1000  # tubes listed between two passes of the loop


def tubes(q, now: int) -> dict:
    return {"tubes": [tube_json(t, now, q.ext) for t in sorted(q.tubes.named.values(), key=lambda t: t.name)]}


# -- the put tags' state (--extensions) ---------------------------------------
#
# Groups, keys and cooldowns are as many as the tagged jobs: a listing looks
# at SCAN_MAX of them at most (a copy of that many dict entries, then
# SCAN_SLICE a pass of the loop: the caller yields where these generators
# do) and lists the first LIST_MAX by name of those it saw. "truncated":
# the list is not all there is.

LIST_MAX = 1000
SCAN_MAX = 100_000
SCAN_SLICE = 5_000


def _first(best: list, found: list) -> list:
    """The LIST_MAX + 1 smallest of both (one more: is there more?)."""
    return sorted(best + found)[:LIST_MAX + 1] if found else best


def _text(name: bytes) -> str:
    return name.decode("latin-1")  # (names are ASCII: protocol.name_ok)


def groups(ext):
    """GET /groups: each group's members (jobs not yet deleted), those of
    them buried, and the aft: jobs it holds, by name; a generator that
    yields between slices and returns the dict."""
    total = len(ext.groups)
    seen = list(islice(ext.groups.items(), SCAN_MAX))
    best: list = []
    for i in range(0, len(seen), SCAN_SLICE):
        if i:
            yield
        live = ext.groups  # (a group may have completed since the copy)
        best = _first(best, [(name, g) for name, g in seen[i:i + SCAN_SLICE]
                             if live.get(name) is g])
    out = [{"name": _text(name), "members": len(g.members), "buried": g.buried,
            "waiting": len(g.waiting)} for name, g in best[:LIST_MAX]]
    return {"groups": out, "total": total,
            "truncated": len(best) > LIST_MAX or len(seen) < total}


def keys(ext, tube_name: bytes, clock):
    """GET /keys?tube=: the tube's idp: keys with the job holding each, and
    the keys in their cooldown (a deleted job's, for its TTL) with the
    deleted job's id and the seconds left, by key; a generator as groups().
    clock(): the monotonic clock, in ns."""
    tube_keys = ext.keys.get(tube_name, {})
    tube_cools = ext.cools.get(tube_name, {})
    held = list(islice(tube_keys.items(), SCAN_MAX))
    cools = list(islice(tube_cools.values(), SCAN_MAX))
    cut = len(held) < len(tube_keys) or len(cools) < len(tube_cools)
    best_keys: list = []
    best_cools: list = []
    for i in range(0, max(len(held), len(cools)), SCAN_SLICE):
        if i:
            yield
        now = clock()
        live = ext.keys.get(tube_name, {})  # (a key may have gone since the copy)
        best_keys = _first(best_keys, [(k, j.id) for k, j in held[i:i + SCAN_SLICE]
                                       if live.get(k) is j])
        best_cools = _first(best_cools, [
            (cd.key, cd.orig, cd.expires) for cd in cools[i:i + SCAN_SLICE]
            if cd.expires > now and ext.cool_ids.get(cd.id) is cd])
    now = clock()
    return {
        "tube": _text(tube_name),
        "keys": [{"key": _text(k), "job": id_} for k, id_ in best_keys[:LIST_MAX]],
        "cooldowns": [{"key": _text(k), "job": orig, "ends_in_s": -(-(expires - now) // NS)}
                      for k, orig, expires in best_cools[:LIST_MAX] if expires > now],
        "truncated": cut or len(best_keys) > LIST_MAX or len(best_cools) > LIST_MAX,
    }


def preview(body: bytes) -> dict:
    """The first PREVIEW bytes as text (when they are UTF-8 without control
    characters other than tab, CR, LF) and as hex."""
    data = body[:PREVIEW]
    truncated = len(body) > PREVIEW
    try:
        # final=False: a character cut at the end of the preview is not an error
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not truncated)
    except UnicodeDecodeError:
        text = None
    if text is not None and CONTROL.search(text):
        text = None
    return {"text": text, "hex": data.hex(), "truncated": truncated}


def job(j, now: int, extra=(), store=None) -> dict:
    """A job's stats, size and preview. Its body is read back through
    store (Store.body) when the binlog holds it (--bodies-on-disk); one
    that cannot be read has a preview of None."""
    d = as_dict(job_fields(j, now, extra))
    d["size"] = len(j.body) - 2  # without the CRLF
    body = j.body if store is None else store.body(j)
    d["preview"] = None if body is None else preview(body[:-2])
    return d


# -- what requests send --------------------------------------------------------

def tube_name(text: str) -> bytes:
    """A tube name from a URL or a body; BadRequest unless the protocol takes it."""
    try:
        name = text.encode("ascii")
    except (UnicodeEncodeError, AttributeError):
        raise BadRequest("bad tube name") from None
    if not name_ok(name):
        raise BadRequest("bad tube name")
    return name


def integer(value, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
    """An int in [low, high] from JSON (a JSON number, not a string)."""
    if type(value) is not int or not low <= value <= high:
        raise BadRequest(f"{what} must be an integer from {low} to {high}")
    return value


def text_integer(value: str | int, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
    """An int in [low, high] from a URL."""
    if isinstance(value, str):
        # (19 digits hold any int64: a longer string is out of range, and int()
        # refuses strings of over 4300 digits with a ValueError)
        digits = value.lstrip("0") or "0"
        if not value.isascii() or not value.isdigit() or len(digits) > 19:
            raise BadRequest(f"{what} must be an integer from {low} to {high}")
        value = int(digits)
    if type(value) is not int or not low <= value <= high:
        raise BadRequest(f"{what} must be an integer from {low} to {high}")
    return value


def body_bytes(req: dict) -> bytes:
    """A put's body: "body" (text, sent as UTF-8) or "body_base64"."""
    if "body_base64" in req:
        try:
            return base64.b64decode(req["body_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest("body_base64 is not base64") from None
    body = req.get("body")
    if not isinstance(body, str):
        raise BadRequest('"body" (a string) or "body_base64" is required')
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800"): valid JSON, not Unicode text
        raise BadRequest('"body" is not Unicode text (a lone surrogate)') from None


def state(value, allowed) -> str:
    if value not in allowed:
        raise BadRequest("state must be one of " + ", ".join(allowed))
    return value

