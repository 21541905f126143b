"""`sluice serve --stdin` under libnbd's connect_command: libnbd starts
the server with a socket as its stdin and stdout, as inetd does; writes
and reads go through it, and closing the handle ends the server.
argv: SLUICE_BINARY IMAGE"""
import os
import sys
import nbd
from nbdtest import *

sluice, image = sys.argv[1], sys.argv[2]
h = nbd.NBD()
h.set_handle_name("connect_command")
h.set_export_name("disk")
h.connect_command([sluice, "serve", "--stdin", "--export", "disk=file:%s,size=1M" % image])
assert h.get_size() == 1 << 20, h.get_size()
data = bytes(range(256)) * 16
h.pwrite(data, 8192)
h.flush()
assert_bytes("read back", h.pread(len(data), 8192), data)
h.shutdown()
print("OK")
