"""The JSON of /api/v1: stats, tubes and jobs as dicts, from the same field
lists as the protocol's YAML (core/stats.py), and the checks on what a
request sends. No I/O here."""
from __future__ import annotations

import base64
import binascii
import codecs
import re

from ..core.protocol import name_ok
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
    q = e.q
    return {"stats": as_dict(server_fields(q, e.counts, e)), "draining": bool(e.draining),
            "memory": {"used": q.memory_used(), "cap": e.max_memory}}


def tube(t, now: int) -> dict:
    return as_dict(tube_fields(t, now))


TUBES_SLICE = 1000  # tubes listed between two passes of the loop


def tubes(q, now: int) -> dict:
    return {"tubes": [tube(t, now) for t in sorted(q.tubes.values(), key=lambda t: t.name)]}


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


def job(j, now: int, extra=()) -> dict:
    d = as_dict(job_fields(j, now, extra))
    body = j.body[:-2]  # without the CRLF
    d["size"] = len(body)
    d["preview"] = preview(body)
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

