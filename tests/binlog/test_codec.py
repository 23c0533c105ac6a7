"""The Wal's record codec (binlog/codec.py): chosen once, when the Wal is
made, from --extensions' tags state; a queue and a codec that disagree on
the tags are refused at recovery rather than found out as lost tags."""
import pytest

from fakeclock import Harness, with_binlog
from pybeanstalkd.binlog import format as F
from pybeanstalkd.binlog.codec import PlainCodec, TaggedCodec, codec_for
from pybeanstalkd.binlog.files import Wal
from pybeanstalkd.binlog.recovery import recover
from pybeanstalkd.core.tags import ExtState


def test_codec_for_the_flag():
    assert isinstance(codec_for(None), PlainCodec)
    st = ExtState()
    codec = codec_for(st)
    assert isinstance(codec, TaggedCodec) and codec.state is st


@pytest.mark.parametrize("tagged, extensions", [(False, True), (True, False), (True, True)],
                         ids=["plain-codec", "tagged-codec", "another-state"])
def test_a_codec_that_disagrees_with_the_queue_is_refused(tmp_path, tagged, extensions):
    """The codec must write exactly the queue's tags: none, or those of the
    very state the queue's policy keeps (one made for another engine would
    write no tags for this one's jobs)."""
    codec = TaggedCodec(ExtState()) if tagged else PlainCodec()
    wal = Wal(str(tmp_path), 1 << 20, warn=lambda m: None, codec=codec)
    h = Harness(store=wal, extensions=extensions)
    with pytest.raises(ValueError):
        recover(wal, h.e.q, h.e.max_job_size, h.now, lambda m: None)


def test_the_queue_and_its_codec_share_one_state(tmp_path):
    h, wal = with_binlog(tmp_path, extensions=True)
    assert wal.codec.state is h.e.q.ext


@pytest.mark.parametrize("extensions", [False, True])
def test_a_full_record_is_its_tags_then_the_job(tmp_path, extensions):
    h, wal = with_binlog(tmp_path, extensions=extensions)
    s = h.conn()
    tags = b" idp:k:60" if extensions else b""
    assert h.send(s, b"put 0 0 60 1%s\r\na\r\n" % tags).startswith(b"INSERTED 1")
    j = h.e.q.jobs[1]
    plain = F.encode(j, True, wal.wall_offset)
    written = wal.codec.full(j, plain)
    assert written.endswith(plain) and (len(written) > len(plain)) is extensions
    assert wal.codec.size(j) == len(written)
