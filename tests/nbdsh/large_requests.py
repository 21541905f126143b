"""Requests at and beyond a 32 MiB maximum payload (the server runs with
--max-request-size 32M): 32 MiB writes and
reads work; zero/trim/cache/block status with an effect length larger than
the maximum payload either work or fail cleanly (EINVAL/EOVERFLOW), never
disconnect.  argv: URI (export of at least 96 MiB)"""
import errno
import nbd
from nbdtest import *

MAXP = 32 << 20
h = connect(uri_arg(), strict=False)
size = h.get_size()
assert size >= 3 * MAXP, size
assert h.get_block_size(nbd.SIZE_MAXIMUM) == MAXP

d = pattern(70, MAXP)
h.pwrite(d, 4096)
assert_bytes("32 MiB read-back", h.pread(MAXP, 4096), d)
h.pwrite(d, size - MAXP, nbd.CMD_FLAG_FUA)
assert_bytes("32 MiB at the end", h.pread(MAXP, size - MAXP), d)

ALLOWED = (errno.EINVAL, errno.EOVERFLOW)


def big(what, fn, check):
    try:
        fn()
    except nbd.Error as e:
        assert e.errnum in ALLOWED, "%s: unexpected error %s" % (what, e)
        print("%s -> %s (allowed)" % (what, e.string))
    else:
        check()
    assert_usable(h)


h.pwrite(b"\x33" * 4096, 2 * MAXP)
big("cache whole export", lambda: h.cache(size, 0), lambda: None)
big("block status whole export", lambda: h.block_status(size, 0, lambda *a: 0), lambda: None)


def zeros_everywhere():
    for off in range(0, size, MAXP):
        n = min(MAXP, size - off)
        assert_zero("after large zero @%d" % off, h.pread(n, off))


big("zero whole export", lambda: h.zero(size, 0), zeros_everywhere)
h.pwrite(d, 4096)
big("trim 64 MiB", lambda: h.trim(2 * MAXP, 0), lambda: None)
h.pwrite(d, 4096)
big("zero NO_HOLE 64 MiB", lambda: h.zero(2 * MAXP, 0, nbd.CMD_FLAG_NO_HOLE),
    lambda: assert_zero("after NO_HOLE zero", h.pread(MAXP, 4096)))
h.shutdown()
print("OK")
