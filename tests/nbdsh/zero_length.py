"""Zero-length requests: libnbd refuses them itself in strict mode; with the
check off they reach the server, which may succeed or fail them but must not
disconnect or change any data."""
import errno
import nbd
from nbdtest import *

h = connect(uri_arg())
size = h.get_size()
data = pattern(1, 8192)
h.pwrite(data, 0)

expect_error("strict zero-length pread", errno.EINVAL, h.pread, 0, 0)

h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ZERO_SIZE)
requests = [
    ("pread", lambda off: h.pread(0, off)),
    ("pwrite", lambda off: h.pwrite(b"", off)),
    ("pwrite+fua", lambda off: h.pwrite(b"", off, nbd.CMD_FLAG_FUA)),
    ("zero", lambda off: h.zero(0, off)),
    ("trim", lambda off: h.trim(0, off)),
    ("cache", lambda off: h.cache(0, off)),
]
for name, fn in requests:
    for off in (0, 4097, size):
        try:
            r = fn(off)
            if name == "pread":
                assert r == b"", "zero-length read returned %d bytes" % len(r)
        except nbd.Error as e:
            print("%s(len=0, off=%d) -> %s (allowed)" % (name, off, e.string))
        assert_usable(h)
        assert h.aio_in_flight() == 0

assert_bytes("data after zero-length requests", h.pread(8192, 0), data)
h.shutdown()
print("OK")
