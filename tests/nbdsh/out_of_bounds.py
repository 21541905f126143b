"""Requests past the end of the export reach the server (strict mode off)
and fail: reads with EINVAL, writes/trims/zeroes with EINVAL or ENOSPC.
Nothing inside the export changes and the connection stays usable."""
import errno
import nbd
from nbdtest import *

h = connect(uri_arg(), strict=False)
size = h.get_size()
tail = pattern(3, 8192)
h.pwrite(tail, size - 8192)

W = (errno.EINVAL, errno.ENOSPC)
cases = [
    ("read straddling end", errno.EINVAL, lambda: h.pread(4096, size - 2048)),
    ("read at end", errno.EINVAL, lambda: h.pread(512, size)),
    ("read far beyond end", errno.EINVAL, lambda: h.pread(512, size * 4 + 12345)),
    ("read with offset+len overflowing 64 bits", errno.EINVAL,
     lambda: h.pread(4096, (1 << 64) - 1024)),
    ("write straddling end", W, lambda: h.pwrite(b"\xff" * 4096, size - 2048)),
    ("write at end", W, lambda: h.pwrite(b"\xff" * 512, size)),
    ("write with FUA beyond end", W, lambda: h.pwrite(b"\xff" * 512, size + 4096, nbd.CMD_FLAG_FUA)),
    ("write with offset+len overflowing 64 bits", W,
     lambda: h.pwrite(b"\xff" * 4096, (1 << 64) - 1024)),
    ("trim straddling end", W, lambda: h.trim(8192, size - 4096)),
    ("zero straddling end", W, lambda: h.zero(8192, size - 4096)),
    ("block status beyond end", errno.EINVAL,
     lambda: h.block_status(4096, size + 4096, lambda *a: 0)),
]
for what, errs, fn in cases:
    expect_error(what, errs, fn)
    assert_usable(h)
    assert_bytes("tail unchanged after %s" % what, h.pread(8192, size - 8192), tail)

h.shutdown()
print("OK")
