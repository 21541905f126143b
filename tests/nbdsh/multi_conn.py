"""Three connections to one multi-conn export: a write on one, a flush on
another, a read on the third sees it; likewise for zero and trim."""
import nbd
from nbdtest import *

uri = uri_arg()
h1, h2, h3 = connect(uri), connect(uri), connect(uri)
for h in (h1, h2, h3):
    assert h.can_multi_conn(), "export must advertise multi-conn"

d = pattern(60, 256 << 10)
h1.pwrite(d, 1 << 20)
h2.flush()
assert_bytes("conn3 sees conn1's write", h3.pread(len(d), 1 << 20), d)

e = pattern(61, 5000)
h3.pwrite(e, (1 << 20) + 777, nbd.CMD_FLAG_FUA)
dd = bytearray(d)
dd[777:777 + len(e)] = e
assert_bytes("conn1 sees conn3's FUA write", h1.pread(len(d), 1 << 20), dd)
assert_bytes("conn2 sees conn3's FUA write", h2.pread(len(d), 1 << 20), dd)

h2.zero(65536, 1 << 20)
h1.flush()
dd[:65536] = bytes(65536)
assert_bytes("conn3 sees conn2's zero", h3.pread(len(d), 1 << 20), dd)

h3.trim(65536, (1 << 20) + 131072)
h2.flush()
dd[131072:196608] = bytes(65536)
assert_bytes("conn1 sees conn3's trim", h1.pread(len(d), 1 << 20), dd)

# Interleaved aio on all three at once.
datas = {}
cookies = {h1: [], h2: [], h3: []}
for i in range(48):
    h = (h1, h2, h3)[i % 3]
    datas[i] = pattern(700 + i, 32768)
    cookies[h].append(h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(datas[i])),
                                   (4 << 20) + i * 32768))
for h, cs in cookies.items():
    wait_all(h, cs)
h1.flush()
for i in range(48):
    h = (h3, h1, h2)[i % 3]
    assert_bytes("aio block %d" % i, h.pread(32768, (4 << 20) + i * 32768), datas[i])
# Caches and read-ahead must never serve stale data: conn1 reads a region
# sequentially (priming any prefetch), conn2 overwrites and trims the part
# ahead of conn1's position, conn1 reads on and must see conn2's changes.
R = 8 << 20
BLK = 128 << 10
base = 8 << 20
old = pattern(80, R)
h1.pwrite(old, base)
h1.flush()
for pos in range(0, R // 2, BLK):
    assert_bytes("sequential read @%d" % pos, h1.pread(BLK, base + pos), old[pos:pos + BLK])
new = pattern(81, R // 4)
h2.pwrite(new, base + R // 2)
h2.trim(R // 4, base + 3 * R // 4)
want = bytearray(old)
want[R // 2:3 * R // 4] = new
want[3 * R // 4:] = bytes(R // 4)
for pos in range(R // 2, R, BLK):
    assert_bytes("read after other connection's write @%d" % pos,
                 h1.pread(BLK, base + pos), want[pos:pos + BLK])
# The same region read twice (cached), rewritten elsewhere, read again.
h3.pread(BLK, base)
h3.pread(BLK, base)
h2.pwrite(b"\x77" * BLK, base)
assert_bytes("re-read after rewrite", h3.pread(BLK, base), b"\x77" * BLK)
h2.zero(BLK, base)
assert_zero("re-read after zero", h3.pread(BLK, base))

for h in (h1, h2, h3):
    h.shutdown()
print("OK")
