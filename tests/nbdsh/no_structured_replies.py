"""A client that does not ask for structured replies gets simple replies:
reads (including error replies, which carry no payload) still work."""
import errno
from nbdtest import *

h = connect(uri_arg(), structured=False, meta=False, strict=False)
assert not h.get_structured_replies_negotiated()
size = h.get_size()
d = pattern(30, 1 << 20)
h.pwrite(d, 3 << 20)
assert_bytes("simple-reply read", h.pread(len(d), 3 << 20), d)
assert_bytes("unaligned simple-reply read", h.pread(777, (3 << 20) + 1), d[1:778])
assert_zero("hole via simple reply", h.pread(65536, 0))
big = h.pread(32 << 20, 0)
assert_bytes("32 MiB read", big[3 << 20:4 << 20], d)
# An error reply to a READ carries no payload; the stream must stay in sync.
expect_error("read past end", errno.EINVAL, h.pread, 4096, size)
assert_bytes("after error", h.pread(4096, 3 << 20), d[:4096])
h.flush()
h.shutdown()
print("OK")
