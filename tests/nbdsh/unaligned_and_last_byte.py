"""Unaligned reads and writes, the last byte and the last partial block."""
from nbdtest import *

uri = uri_arg()
h = connect(uri)
size = h.get_size()
assert size >= 1 << 20, size

N = 3 * 4096
base = bytearray(pattern(2, N))
h.pwrite(bytes(base), 0)
for off, ln in [(1, 1), (511, 2), (4095, 2), (1000, 5000), (4097, 4095), (123, 7), (8191, 4097)]:
    d = pattern(off * 31 + ln, ln)
    h.pwrite(d, off)
    base[off:off + ln] = d
assert_bytes("after unaligned writes", h.pread(N, 0), base)
for off, ln in [(1, 1), (3, 4093), (4095, 3), (777, 8000), (0, N), (N - 1, 1)]:
    assert_bytes("unaligned read %d+%d" % (off, ln), h.pread(ln, off), base[off:off + ln])

# The very last byte, and a write that ends exactly at the end.
h.pwrite(b"\x5a", size - 1)
assert h.pread(1, size - 1) == b"\x5a"
tail = pattern(9, 4096 + 3)
h.pwrite(tail, size - len(tail))
assert_bytes("tail", h.pread(len(tail), size - len(tail)), tail)
assert_bytes("last 7", h.pread(7, size - 7), tail[-7:])
h.flush()

# Another connection sees all of it.
h2 = connect(uri)
assert_bytes("2nd connection head", h2.pread(N, 0), base)
assert_bytes("2nd connection tail", h2.pread(len(tail), size - len(tail)), tail)
h.shutdown()
h2.shutdown()
print("OK")
