"""Requests beyond the 32 MiB the NBD spec suggests, from a client that
negotiates simple replies (as old clients do).  When the server's maximum
is at least 48 MiB (the default is 64 MiB): one 48 MiB write and one
48 MiB read of it work.  When it is below 32 MiB: a read of twice the
maximum fails with EINVAL (not EOVERFLOW, which the spec reserves for
chunked replies) and the connection stays usable.
argv: URI (export of at least 64 MiB)"""
import errno
import nbd
from nbdtest import *

h = connect(uri_arg(), strict=False, meta=False, structured=False)
assert h.get_size() >= 64 << 20
maximum = h.get_block_size(nbd.SIZE_MAXIMUM)
if maximum >= 48 << 20:
    data = pattern(48, 48 << 20)
    h.pwrite(data, 8 << 20)
    assert_bytes("48 MiB read-back", h.pread(len(data), 8 << 20), data)
elif maximum < 32 << 20:
    try:
        h.pread(2 * maximum, 0)
    except nbd.Error as e:
        assert e.errnum == errno.EINVAL, "oversized read: %s" % e
    else:
        raise AssertionError("a read of twice the maximum succeeded")
else:
    raise AssertionError("maximum %d: nothing to test" % maximum)
assert_usable(h)
h.shutdown()
print("OK")
