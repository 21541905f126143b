"""base:allocation block status, with and without REQ_ONE, on a fresh
(all-hole) export after writing a few aligned and unaligned ranges."""
import nbd
from nbdtest import *

M = 1 << 20
K = 4096
h = connect(uri_arg())
size = h.get_size()
assert size >= 16 * M, size
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION), "base:allocation not negotiated"

ex = extents(h, 0, size)
assert sum(e[1] for e in ex) == size, ex
assert all(e[2] == EXTENT_HOLE | EXTENT_ZERO for e in ex), "fresh export must be all hole|zero: %s" % ex

h.pwrite(pattern(5, M), M)              # [1M, 2M)
h.pwrite(pattern(6, K), 5 * M)          # [5M, 5M+4K)
h.pwrite(b"\x01", 9 * M + 100)          # one byte inside [9M, 9M+4K)

ex = extents(h, 0, size)
assert sum(e[1] for e in ex) == size, ex
for off in (M, M + K, 2 * M - 1, 5 * M, 5 * M + K - 1, 9 * M + 100):
    assert status_at(ex, off) == 0, "offset %d holds data: %s" % (off, ex)
for off in (0, M - 1, 2 * M, 3 * M, 5 * M - 1, 8 * M, 12 * M, size - 1):
    assert status_at(ex, off) == EXTENT_HOLE | EXTENT_ZERO, "offset %d is a hole: %s" % (off, ex)

# A query that starts in the middle of an extent.
ex2 = extents(h, M + 12345, 3 * M)
assert ex2[0][0] == M + 12345 and ex2[0][2] == 0, ex2
assert ex2[0][1] == M - 12345, "data extent should end at 2M: %s" % ex2

# REQ_ONE: exactly one extent, never longer than the request.
for off, ln, want_flags, max_len in [
    (0, 4 * M, 3, M),            # hole up to 1M
    (M, 4 * M, 0, M),            # data up to 2M
    (M + K, 64 * K, 0, 64 * K),  # data, request shorter than the extent
    (3 * M, 16 * K, 3, 16 * K),  # hole, request shorter than the extent
    (size - K, K, 3, K),         # last block
]:
    got = []

    def cb(ctx, o, entries, err):
        got.append(list(entries))
        return 0

    h.block_status(ln, off, cb, nbd.CMD_FLAG_REQ_ONE)
    assert len(got) == 1, got
    assert len(got[0]) == 2, "REQ_ONE must return exactly one extent, got %s" % got[0]
    length, flags = got[0]
    assert 0 < length <= ln, "REQ_ONE extent length %d outside (0, %d]" % (length, ln)
    assert length <= max_len, "extent at %d longer than the run: %d > %d" % (off, length, max_len)
    assert flags == want_flags, "flags at %d: %d, want %d" % (off, flags, want_flags)

# The helper checks REQ_ONE rules on every round trip too.
ex3 = extents(h, 0, 6 * M, nbd.CMD_FLAG_REQ_ONE)
assert sum(e[1] for e in ex3) == 6 * M
assert status_at(ex3, M) == 0 and status_at(ex3, 3 * M) == 3, ex3
h.shutdown()
print("OK")
