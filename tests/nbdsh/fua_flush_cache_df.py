"""FUA writes, FLUSH, CACHE and DF reads.  With a backing file argument the
script also checks that FUA/flushed data is in the file while the server is
still running (the server must not keep it only in its write-back cache)."""
import os
import sys
import nbd
from nbdtest import *

uri = uri_arg()
backing = sys.argv[2] if len(sys.argv) > 2 else None
h = connect(uri)
size = h.get_size()
for cap in ("can_fua", "can_flush", "can_cache", "can_df"):
    assert getattr(h, cap)(), cap


def file_bytes(off, n):
    with open(backing, "rb") as f:
        f.seek(off)
        return f.read(n)


a = pattern(10, 65536)
h.pwrite(a, 8192, nbd.CMD_FLAG_FUA)
assert_bytes("FUA write read-back", h.pread(len(a), 8192), a)
if backing:
    assert_bytes("FUA write in backing file", file_bytes(8192, len(a)), a)

b = pattern(11, 100000)
h.pwrite(b, 1 << 20)
h.flush()
if backing:
    assert_bytes("flushed write in backing file", file_bytes(1 << 20, len(b)), b)

h.zero(4096, 8192, nbd.CMD_FLAG_FUA)
assert_zero("FUA zero", h.pread(4096, 8192))
if backing:
    assert_zero("FUA zero in backing file", file_bytes(8192, 4096))

# CACHE is advisory but must succeed and change nothing.
h.cache(min(size, 32 << 20), 0)
h.cache(1000, 8192 + 4096 + 3)
assert_bytes("after cache", h.pread(len(a) - 4096, 8192 + 4096), a[4096:])

# DF: the whole read arrives as exactly one content chunk; data identical.
def df_read(count, offset):
    chunks = []

    def cb(subbuf, off, status, err):
        chunks.append((bytes(subbuf), off, status))
        return 0

    buf = h.pread_structured(count, offset, cb, nbd.CMD_FLAG_DF)
    content = [c for c in chunks if c[2] in (nbd.READ_DATA, nbd.READ_HOLE)]
    assert len(content) == 1, "DF read got %d content chunks" % len(content)
    assert content[0][1] == offset and len(content[0][0]) == count, \
        "DF chunk covers %d+%d, want %d+%d" % (content[0][1], len(content[0][0]), offset, count)
    return buf


assert_bytes("DF read", df_read(len(b), 1 << 20), b)
assert_zero("DF read of a hole", df_read(65536, size - 65536))
assert_bytes("DF read, unaligned", df_read(1001, (1 << 20) + 3), b[3:1004])

# Flush on a second connection also works, and it sees the data.
h2 = connect(uri)
h2.flush()
assert_bytes("2nd connection", h2.pread(len(b), 1 << 20), b)
h.shutdown()
h2.shutdown()
print("OK")
