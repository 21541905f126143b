"""Extended headers negotiated through libnbd, where the installed libnbd
has the API (libnbd >= 1.18); otherwise that part is skipped (the raw
protocol tests and qemu >= 9 still exercise extended headers)."""
import nbd
from nbdtest import *

uri = uri_arg()
h = nbd.NBD()
if not hasattr(h, "set_request_extended_headers"):
    print("SKIP: libnbd %s has no set_request_extended_headers; extended-header part skipped"
          % nbd.NBD().get_version())
    # Still check a plain session works so the test is not empty.
    h = connect(uri)
    d = pattern(20, 65536)
    h.pwrite(d, 4096)
    assert_bytes("plain session", h.pread(len(d), 4096), d)
    print("OK")
    raise SystemExit(0)

h.set_request_extended_headers(True)
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)
assert h.get_extended_headers_negotiated(), "server did not negotiate extended headers"
assert h.get_structured_replies_negotiated()
d = pattern(21, 3 << 20)
h.pwrite(d, 12345)
assert_bytes("extended read-back", h.pread(len(d), 12345), d)
assert_zero("extended hole read", h.pread(65536, h.get_size() - 65536))
ex = extents(h, 0, h.get_size())
assert sum(e[1] for e in ex) == h.get_size()
assert status_at(ex, 12345 + 4096) == 0, ex
h.flush()
h.shutdown()
print("OK")
