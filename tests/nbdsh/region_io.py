"""Writes or verifies one region with a seeded pattern, 16 requests in
flight.  Used to run several writers on separate connections at once.
argv: URI write|verify OFFSET LENGTH SEED"""
import sys
import nbd
from nbdtest import *

uri, mode = uri_arg(1), sys.argv[2]
offset, length, seed = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
data = pattern(seed, length)
CH = 65536
h = connect(uri)
if mode == "write":
    pending = []
    for pos in range(0, length, CH):
        chunk = data[pos:pos + CH]
        pending.append(h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(chunk)), offset + pos))
        if len(pending) >= 16:
            wait_all(h, pending[:8])
            pending = pending[8:]
    wait_all(h, pending)
    h.flush()
elif mode == "verify":
    for pos in range(0, length, 1 << 20):
        n = min(1 << 20, length - pos)
        assert_bytes("region @%d" % (offset + pos), h.pread(n, offset + pos), data[pos:pos + n])
else:
    raise SystemExit("bad mode " + mode)
h.shutdown()
print("OK")
