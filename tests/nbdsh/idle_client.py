"""Writes two regions from files (the first flushed, the second only
acknowledged), prints "ready", then stays connected and idle until killed
or its stdin closes.  argv: URI FILE_A OFFSET_A FILE_B OFFSET_B"""
import sys
from nbdtest import *

uri = uri_arg()
a = open(sys.argv[2], "rb").read()
b = open(sys.argv[4], "rb").read()
h = connect(uri)
h.pwrite(a, int(sys.argv[3]))
h.flush()
h.pwrite(b, int(sys.argv[5]))
print("ready", flush=True)
sys.stdin.read()
