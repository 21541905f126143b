"""Error injection (export option fail=...) without a cache: each injected
error reaches the client as the right NBD error, the connection stays
usable, a failed flush keeps failing, and another export on the same
server (and another connection) is not affected.

usage: injected_errors.py BAD_URI GOOD_URI
BAD_URI's export: fail=write:enospc:after=4,fail=read:eio:nth=3,fail=flush:eio:nth=2
"""
import errno
import nbd
from nbdtest import *

bad = connect(uri_arg(1))
good = connect(uri_arg(2))
blocks = [pattern(i, 4096) for i in range(6)]

# Writes 1-4 succeed, every later one fails with ENOSPC.
for i in range(4):
    bad.pwrite(blocks[i], i * 4096)
for i in (4, 5):
    expect_error("write %d after the limit" % (i + 1), errno.ENOSPC,
                 bad.pwrite, blocks[i], i * 4096)

# Reads: the 3rd fails with EIO, the others return what was written.
assert_bytes("read 1", bad.pread(4096, 0), blocks[0])
assert_bytes("read 2", bad.pread(4096, 4096), blocks[1])
expect_error("read 3", errno.EIO, bad.pread, 4096, 8192)
assert_bytes("read 4", bad.pread(4096, 8192), blocks[2])
assert_bytes("read 5", bad.pread(4096, 12288), blocks[3])
assert_zero("refused write left nothing", bad.pread(4096, 16384))

# Flush: the 2nd fails, and so does every later one (never a false
# success after a failed sync).
bad.flush()
expect_error("flush 2", errno.EIO, bad.flush)
expect_error("flush 3 after a failed flush", errno.EIO, bad.flush)

# Another connection to the same export sees the same device state.
other = connect(uri_arg(1))
assert_bytes("second connection", other.pread(4096, 0), blocks[0])
other.shutdown()

# The other export works normally throughout.
for i in range(6):
    good.pwrite(blocks[i], i * 4096)
good.flush()
for i in range(6):
    assert_bytes("good export block %d" % i, good.pread(4096, i * 4096), blocks[i])
good.flush()

bad.shutdown()
good.shutdown()
print("OK")
