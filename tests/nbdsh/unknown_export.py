"""Connecting to a missing export fails cleanly (in normal and in opt
mode), and the server keeps serving.  argv: BAD_URI GOOD_URI"""
import nbd
from nbdtest import *

bad, good = uri_arg(1), uri_arg(2)
for _ in range(3):
    h = nbd.NBD()
    try:
        h.connect_uri(bad)
        raise AssertionError("connecting to %s should fail" % bad)
    except nbd.Error as e:
        print("expected failure: %s" % e.string)

h = nbd.NBD()
h.set_opt_mode(True)
h.connect_uri(bad)
try:
    h.opt_info()
    raise AssertionError("opt_info for a missing export should fail")
except nbd.Error as e:
    print("expected opt_info failure: %s" % e.string)
try:
    h.opt_go()
    raise AssertionError("opt_go for a missing export should fail")
except nbd.Error as e:
    print("expected opt_go failure: %s" % e.string)
assert h.aio_is_negotiating(), "a failed NBD_OPT_GO must leave negotiation open"
h.opt_abort()

g = connect(good)
d = pattern(40, 4096)
g.pwrite(d, 0)
assert_bytes("good export", g.pread(4096, 0), d)
g.shutdown()
print("OK")
