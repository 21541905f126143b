"""Option negotiation driven by hand: NBD_OPT_LIST, NBD_OPT_INFO per
export (size, read-only, block sizes), a failed INFO, then NBD_OPT_GO.
argv: BASE_URI NAME:SIZE:rw|ro ..."""
import sys
import nbd
from nbdtest import *

base = uri_arg(1)
expected = {}
for spec in sys.argv[2:]:
    name, size, mode = spec.split(":")
    expected[name] = (int(size), mode == "ro")

h = nbd.NBD()
h.set_opt_mode(True)
h.set_full_info(True)
h.connect_uri(base)
assert h.aio_is_negotiating()

listed = {}
def cb(name, desc):
    assert name not in listed, "export %r listed twice" % name
    listed[name] = desc
    return 0
n = h.opt_list(cb)
assert n == len(listed), (n, listed)
assert set(listed) == set(expected), "NBD_OPT_LIST gave %s, want %s" % (sorted(listed), sorted(expected))

for name, (size, ro) in expected.items():
    h.set_export_name(name)
    h.opt_info()
    assert h.get_size() == size, "%s: size %d, want %d" % (name, h.get_size(), size)
    assert bool(h.is_read_only()) == ro, "%s: read-only %s, want %s" % (name, h.is_read_only(), ro)
    assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, name
    assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096, name
    assert h.get_block_size(nbd.SIZE_MAXIMUM) == 64 << 20, name
    if not ro:
        assert h.can_flush() and h.can_multi_conn() and h.can_trim(), name
    assert h.get_export_name() == name

h.set_export_name("no-such-export")
try:
    h.opt_info()
    raise AssertionError("NBD_OPT_INFO for a missing export should fail")
except nbd.Error as e:
    print("expected: %s" % e.string)
assert h.aio_is_negotiating()

rw = [n for n, (s, ro) in expected.items() if not ro][0]
h.set_export_name(rw)
h.opt_go()
assert not h.aio_is_negotiating()
assert h.get_size() == expected[rw][0]
d = pattern(50, 4096)
h.pwrite(d, 0)
assert_bytes("after opt_go", h.pread(4096, 0), d)
h.shutdown()
print("OK")
