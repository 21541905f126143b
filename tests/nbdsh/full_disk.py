"""A file export on a filesystem that fills up: writes fail with ENOSPC
(never EIO, never a hang), data written before stays intact, the
connection stays usable, and freeing space (trim punches holes) makes
writes work again.

usage: full_disk.py URI FS_BYTES [CHUNK]
  FS_BYTES: size of the filesystem; CHUNK: bytes per write (default
  65536; 128 KiB and more take the server's spliced-write path)
"""
import sys
import errno
import nbd
from nbdtest import *

h = connect(uri_arg(1))
fs_bytes = int(uri_arg(2))
chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
written = []
failed_at = None
for i in range(2 * fs_bytes // chunk):
    data = pattern(i, chunk)
    try:
        h.pwrite(data, i * chunk)
        written.append(data)
    except nbd.Error as e:
        assert e.errnum == errno.ENOSPC, "write %d: expected ENOSPC, got %s (%s)" % (
            i, errno.errorcode.get(e.errnum, e.errnum), e.string)
        failed_at = i
        break
assert failed_at is not None, "the filesystem never filled up"
assert failed_at * chunk <= fs_bytes, failed_at
expect_error("write again while full", errno.ENOSPC,
             h.pwrite, pattern(999, chunk), failed_at * chunk)
for i, data in enumerate(written):
    assert_bytes("block %d written before the disk filled" % i, h.pread(chunk, i * chunk), data)
h.flush()

# Free the first half and write there again.
half = (len(written) // 2) * chunk
h.trim(half, 0)
assert_zero("trimmed range", h.pread(chunk, 0))
h.pwrite(pattern(1000, chunk), 0)
assert_bytes("write after freeing space", h.pread(chunk, 0), pattern(1000, chunk))
h.flush()
h.shutdown()
print("OK")
