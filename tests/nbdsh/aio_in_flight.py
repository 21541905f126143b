"""Many requests in flight on one connection (aio_pwrite / aio_pread /
aio_flush), completing correctly whatever order the server answers in.
argv: URI [DEPTH]"""
import sys
import nbd
from nbdtest import *

uri = uri_arg()
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 64
h = connect(uri)
size = h.get_size()
BS = 65536
assert size >= 2 * depth * BS + (64 << 20), size

# 1. depth writes at once, distinct patterns.
datas = [pattern(100 + i, BS) for i in range(depth)]
cookies = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(d)), i * BS)
           for i, d in enumerate(datas)]
wait_all(h, cookies)

# 2. depth reads at once.
bufs = [nbd.Buffer(BS) for _ in range(depth)]
cookies = [h.aio_pread(b, i * BS) for i, b in enumerate(bufs)]
wait_all(h, cookies)
for i, b in enumerate(bufs):
    assert_bytes("aio read %d" % i, b.to_bytearray(), datas[i])

# 3. Mixed: reads of region 1 while writing region 2 (no overlap), odd sizes
#    and offsets, with flushes interleaved.
off2 = depth * BS
sizes = [1 + (i * 7919) % BS for i in range(depth)]
datas2 = [pattern(300 + i, sizes[i]) for i in range(depth)]
rbufs = [nbd.Buffer(BS) for _ in range(depth)]
cookies = []
for i in range(depth):
    cookies.append(h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(datas2[i])),
                                off2 + i * BS + 3, flags=nbd.CMD_FLAG_FUA if i % 5 == 0 else 0))
    cookies.append(h.aio_pread(rbufs[i], (depth - 1 - i) * BS))
    if i % 16 == 15:
        cookies.append(h.aio_flush())
wait_all(h, cookies)
for i in range(depth):
    assert_bytes("mixed read %d" % i, rbufs[i].to_bytearray(), datas[depth - 1 - i])
for i in range(depth):
    assert_bytes("mixed write %d" % i, h.pread(sizes[i], off2 + i * BS + 3), datas2[i])

# 4. Large requests in flight: 16 x 4 MiB writes then reads.
big = 4 << 20
base = size - 16 * big
bigdata = [pattern(500 + i, big) for i in range(16)]
wait_all(h, [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(d)), base + i * big)
             for i, d in enumerate(bigdata)])
bb = [nbd.Buffer(big) for _ in range(16)]
wait_all(h, [h.aio_pread(b, base + i * big) for i, b in enumerate(bb)])
for i in range(16):
    assert_bytes("big %d" % i, bb[i].to_bytearray(), bigdata[i])

assert h.aio_in_flight() == 0
h.shutdown()
print("OK")
