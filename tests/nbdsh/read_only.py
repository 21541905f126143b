"""A read-only export: advertises read-only, rejects every modifying
command with EPERM (when the request reaches the server), keeps its data.
argv: URI BACKING_FILE"""
import errno
import sys
import nbd
from nbdtest import *

uri = uri_arg()
backing = sys.argv[2]
with open(backing, "rb") as f:
    want = f.read(1 << 20)

h = connect(uri)
assert h.is_read_only(), "export should be read-only"
assert_bytes("read-only export content", h.pread(len(want), 0), want)
# libnbd refuses on its own first ...
expect_error("client-side check", errno.EPERM, h.pwrite, b"x" * 512, 0)
# ... then with the check off the server must refuse.
h.set_strict_mode(0)
expect_error("pwrite", errno.EPERM, h.pwrite, b"x" * 512, 0)
# A flag or command the export does not advertise may be refused as EINVAL
# before the read-only check; what matters is that nothing is written.
def refusal(advertised):
    return errno.EPERM if advertised else (errno.EPERM, errno.EINVAL)
expect_error("pwrite FUA", refusal(h.can_fua()), h.pwrite, b"x" * 512, 4096, nbd.CMD_FLAG_FUA)
expect_error("zero", refusal(h.can_zero()), h.zero, 4096, 0)
expect_error("trim", refusal(h.can_trim()), h.trim, 4096, 0)
assert_bytes("content unchanged", h.pread(len(want), 0), want)
h.shutdown()
with open(backing, "rb") as f:
    assert_bytes("backing file unchanged", f.read(1 << 20), want)
print("OK")
