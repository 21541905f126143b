"""TRIM and WRITE_ZEROES (plain, NO_HOLE, FAST_ZERO): zeros read back,
neighbouring bytes are untouched, block status agrees.  With a backing file
argument also checks holes in the file (SEEK_HOLE/SEEK_DATA) after flush."""
import errno
import os
import sys
import nbd
from nbdtest import *

M = 1 << 20
uri = uri_arg()
backing = sys.argv[2] if len(sys.argv) > 2 else None
h = connect(uri)
size = h.get_size()
assert size >= 8 * M, size
for cap in ("can_trim", "can_zero", "can_fast_zero"):
    assert getattr(h, cap)(), cap

d = bytearray(pattern(4, 8 * M))
h.pwrite(bytes(d), 0)

def check(what):
    assert_bytes(what, h.pread(8 * M, 0), d)

# TRIM of an aligned MiB: reads back zeros (sluice punches a hole).
h.trim(M, M)
d[M:2 * M] = bytes(M)
check("after aligned trim")
# Unaligned trim: the contents of the trimmed range are unspecified by NBD,
# but nothing outside it may change.
h.trim(1000, 2 * M + 100)
got = h.pread(8 * M, 0)
assert_bytes("before unaligned trim range", got[:2 * M + 100], d[:2 * M + 100])
assert_bytes("after unaligned trim range", got[2 * M + 1100:], d[2 * M + 1100:])
d[2 * M + 100:2 * M + 1100] = got[2 * M + 100:2 * M + 1100]

# Plain write-zeroes, aligned and unaligned: exact zeros, neighbours intact.
h.zero(M, 3 * M)
d[3 * M:4 * M] = bytes(M)
h.zero(3000, 4 * M + 5)
d[4 * M + 5:4 * M + 3005] = bytes(3000)
check("after write_zeroes")

# NO_HOLE: zeros, and the range stays allocated.
h.zero(M, 5 * M, nbd.CMD_FLAG_NO_HOLE)
d[5 * M:6 * M] = bytes(M)
check("after write_zeroes NO_HOLE")

# FAST_ZERO: either succeeds (zeros) or fails fast with ENOTSUP.
try:
    h.zero(M, 6 * M, nbd.CMD_FLAG_FAST_ZERO)
    d[6 * M:7 * M] = bytes(M)
    check("after write_zeroes FAST_ZERO")
except nbd.Error as e:
    assert e.errnum == errno.ENOTSUP, "FAST_ZERO may only fail with ENOTSUP: %s" % e
    print("FAST_ZERO -> ENOTSUP (allowed)")
    got = h.pread(M, 6 * M)
    assert got == bytes(d[6 * M:7 * M]) or got == bytes(M), "FAST_ZERO failure changed data partially"
    d[6 * M:7 * M] = got

# FAST_ZERO together with NO_HOLE.
try:
    h.zero(65536, 7 * M, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
    d[7 * M:7 * M + 65536] = bytes(65536)
except nbd.Error as e:
    assert e.errnum == errno.ENOTSUP, e
check("final")

if h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION):
    ex = extents(h, 0, 8 * M)
    for off in (M, M + 4096, 2 * M - 1, 3 * M, 4 * M - 1):
        fl = status_at(ex, off)
        assert fl & EXTENT_ZERO, "trimmed/zeroed offset %d should read as zero: %d %s" % (off, fl, ex)
    for off in (0, M - 1, 2 * M + 2000, 4 * M + 3005 + 4096):
        assert status_at(ex, off) == 0, "offset %d holds data: %s" % (off, ex)
    if backing:
        # For a file export allocation is the file's; NO_HOLE keeps it allocated.
        for off in (5 * M, 5 * M + 4096, 6 * M - 1):
            fl = status_at(ex, off)
            assert not fl & EXTENT_HOLE, "NO_HOLE zeroed offset %d must not be a hole: %s" % (off, ex)

h.flush()
if backing:
    with open(backing, "rb") as f:
        fd = f.fileno()
        # Trimmed and plain-zeroed MiBs are holes in the file ...
        for off in (M, 3 * M):
            assert os.lseek(fd, off, os.SEEK_HOLE) == off, "no hole at %d in backing file" % off
        # ... and the NO_HOLE one is allocated.
        assert os.lseek(fd, 5 * M, os.SEEK_DATA) == 5 * M, "NO_HOLE range not allocated in file"
        f.seek(0)
        assert_bytes("backing file", f.read(8 * M), d)
h.shutdown()
print("OK")
