"""Error injection under the write-back cache: the device beneath the
cache fails every write with EIO. Writes are acknowledged from the cache
and read back, but FLUSH (and a FUA write) must fail with EIO, again and
again, since the data never reached the device; the other export works.

usage: injected_errors_write_back.py BAD_URI GOOD_URI
BAD_URI's export: fail=write:eio:after=0, served with --cache writeback
"""
import errno
import nbd
from nbdtest import *

bad = connect(uri_arg(1))
good = connect(uri_arg(2))
data = pattern(7, 65536)

bad.pwrite(data, 0)
assert_bytes("cached write reads back", bad.pread(65536, 0), data)
for i in range(3):
    expect_error("flush %d with the device failing" % (i + 1), errno.EIO, bad.flush)
expect_error("FUA write with the device failing", errno.EIO,
             bad.pwrite, data, 65536, nbd.CMD_FLAG_FUA)
assert_bytes("data still served from the cache", bad.pread(65536, 0), data)

good.pwrite(data, 0)
good.flush()
assert_bytes("good export", good.pread(65536, 0), data)

bad.shutdown()
good.shutdown()
print("OK")
