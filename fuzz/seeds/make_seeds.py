#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/seeds/<target>/ (committed).

Each seed is a real client byte sequence (what libnbd, qemu, nbdinfo or
the kernel's nbd-client send) wrapped in the input layout its target
documents. Run from anywhere: python3 fuzz/seeds/make_seeds.py
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS = 1, 2, 3, 5
OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY = 6, 7, 8
OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_EXTENDED_HEADERS = 9, 10, 11
INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE = 1, 2, 3


def opt(option, data=b""):
    return b"IHAVEOPT" + struct.pack(">II", option, len(data)) + data


def go(name, reqs=()):
    n = name.encode()
    return (struct.pack(">I", len(n)) + n + struct.pack(">H", len(reqs))
            + b"".join(struct.pack(">H", r) for r in reqs))


def meta(name, queries=()):
    n = name.encode()
    d = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        d += struct.pack(">I", len(q)) + q
    return d


def compact(kind, offset, length, flags=0, cookie=1):
    return struct.pack(">IHHQQI", 0x25609513, flags, kind, cookie, offset, length)


def extended(kind, offset, length, flags=0, cookie=1):
    return struct.pack(">IHHQQQ", 0x21E41C71, flags, kind, cookie, offset, length)


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- nbd_handshake: limit byte, 16 piece sizes, client bytes -------------

BYTEWISE = bytes(17)  # default config, one byte at a time
MIXED = bytes([0, 3, 7, 0, 15, 1, 31, 2, 63, 5, 0, 11, 127, 4, 255, 8, 19])

libnbd = (struct.pack(">I", 3) + opt(OPT_STRUCTURED_REPLY)
          + opt(OPT_SET_META_CONTEXT, meta("", [b"base:allocation"]))
          + opt(OPT_GO, go("", [INFO_BLOCK_SIZE]))
          + compact(0, 0, 4096))
qemu_ext = (struct.pack(">I", 3) + opt(OPT_EXTENDED_HEADERS)
            + opt(OPT_SET_META_CONTEXT,
                  meta("a", [b"base:allocation", b"qemu:dirty-bitmap:bitmap0"]))
            + opt(OPT_GO, go("a", [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]))
            + extended(7, 0, 1 << 20))
qemu_sr = (struct.pack(">I", 3) + opt(OPT_STRUCTURED_REPLY)
           + opt(OPT_LIST_META_CONTEXT, meta("", [b"base:"]))
           + opt(OPT_SET_META_CONTEXT, meta("", [b"base:allocation"]))
           + opt(OPT_GO, go("", [INFO_BLOCK_SIZE])))
nbdinfo_list = (struct.pack(">I", 3) + opt(OPT_STRUCTURED_REPLY) + opt(OPT_LIST)
                + opt(OPT_INFO, go("a", [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]))
                + opt(OPT_LIST_META_CONTEXT, meta("a"))
                + opt(OPT_INFO, go("b", [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]))
                + opt(OPT_ABORT))
kernel = struct.pack(">I", 1) + opt(OPT_EXPORT_NAME, b"a")
fallback = (struct.pack(">I", 3) + opt(OPT_STARTTLS) + opt(99, b"xyz")
            + opt(OPT_EXTENDED_HEADERS, b"\0") + opt(OPT_STRUCTURED_REPLY)
            + opt(OPT_GO, go("nope")) + opt(OPT_SET_META_CONTEXT, meta("a", [b"base:allocation"]))
            + opt(OPT_GO, go("b", [INFO_BLOCK_SIZE])))

write("nbd_handshake", "libnbd-structured", BYTEWISE + libnbd)
write("nbd_handshake", "qemu-extended", MIXED + qemu_ext)
write("nbd_handshake", "qemu-structured", MIXED + qemu_sr)
write("nbd_handshake", "nbdinfo-list", BYTEWISE + nbdinfo_list)
write("nbd_handshake", "kernel-export-name", BYTEWISE + kernel)
write("nbd_handshake", "errors-then-go", MIXED + fallback)
# max_option_len 32: a 40-byte option is skipped, then the session goes on.
write("nbd_handshake", "oversized-skipped",
      bytes([0x10]) + MIXED[1:] + struct.pack(">I", 3) + opt(OPT_GO, bytes(40))
      + opt(OPT_LIST) + opt(OPT_GO, go("a")))
# max_option_len 16, disconnect above 80.
write("nbd_handshake", "oversized-disconnect",
      bytes([0x88]) + MIXED[1:] + struct.pack(">I", 3) + opt(99, bytes(20))
      + opt(99, bytes(100)))

# --- nbd_request: 17-byte parameters, then a request stream ---------------

FLAGS = 0x0001 | 0x0004 | 0x0008 | 0x0020 | 0x0040 | 0x0080 | 0x0400 | 0x0800


def params(size, flags, style, max_payload, min_shift, block_status):
    return struct.pack(">QHBIBB", size, flags, style, max_payload, min_shift, block_status)


compact_stream = (compact(0, 0, 4096, flags=1 << 2)            # READ, DF
                  + compact(1, 4096, 8, flags=1) + b"payload!"  # WRITE, FUA
                  + compact(3, 0, 0)                             # FLUSH
                  + compact(4, 0, 65536, flags=1)                # TRIM, FUA
                  + compact(6, 0, 4096, flags=(1 << 1) | (1 << 4))  # WRITE_ZEROES
                  + compact(7, 0, 1 << 20, flags=1 << 3)         # BLOCK_STATUS
                  + compact(5, 0, 512)                           # CACHE
                  + compact(2, 0, 0))                            # DISC
extended_stream = (extended(0, 0, 4096)
                   + extended(1, 4096, 8, flags=1 << 5) + b"payload!"
                   + extended(6, 0, 1 << 33)
                   + extended(7, 0, 1 << 40, flags=1 << 3)
                   + extended(4, 0, 1 << 20)
                   + extended(2, 0, 0))
bad_stream = (compact(0, (1 << 20) - 512, 1024)                  # past the end
              + compact(1, 100, 512) + bytes(512)                # misaligned
              + compact(0, 0, 1 << 26)                           # too long
              + compact(99, 0, 0)                                # unknown
              + compact(0, 0, 512, flags=1 << 9)                 # unknown flag
              + compact(0, 0xFFFFFFFFFFFFFE00, 512))             # overflow

write("nbd_request", "compact-structured",
      params(1 << 20, FLAGS, 2, 1 << 25, 0, 1) + compact_stream)
write("nbd_request", "extended",
      params(1 << 41, FLAGS, 5, 1 << 25, 9, 1) + extended_stream)
write("nbd_request", "simple-read-only-512",
      params(1 << 20, 0x0003 | 0x0004, 0, 1 << 25, 9, 0) + bad_stream)

# --- nbd_option_sequence: flags byte, then tagged ops ---------------------
# tags: 0 EXPORT_NAME 1 ABORT 2 LIST 3 STARTTLS 4 INFO 5 GO 6 STRUCTURED
# 7 LIST_META 8 SET_META 9 EXTENDED 10 unknown 11 raw 12/13 with data
# names: 0 "", 1 "a", 2 "b", 3 "c", 4 blob; queries: 0 base:allocation,
# 1 base:, 2 qemu:dirty-bitmap:x, 3 blob


def blob(b):
    return bytes([len(b)]) + b


seqs = {
    "libnbd-structured": bytes([3, 6, 8, 0, 1, 0, 5, 0, 1, 0, 3]),
    "qemu-extended": bytes([3, 9, 8, 1, 2, 0, 2, 5, 1, 3, 0, 1, 0, 2, 0, 3]),
    "nbdinfo-list": bytes([3, 6, 2, 0, 4, 1, 3, 0, 1, 0, 2, 0, 3, 4, 2, 0,
                           7, 1, 0, 1, 0]),
    "kernel-export-name": bytes([1, 0, 1]),
    "set-a-go-b": bytes([3, 6, 8, 1, 1, 0, 5, 2, 0]),
    "errors-then-raw-set": (bytes([3, 3, 0, 10, 0, 0, 0, 99]) + blob(b"xy")
                            + bytes([12, 1, 0, 6, 11, 3])
                            + blob(meta("a", [b"base:allocation"]))
                            + bytes([5, 0, 0])),
    "extended-then-export-name": bytes([3, 6, 9, 6, 0, 1]),
}
for name, data in seqs.items():
    write("nbd_option_sequence", name, data)

# --- nbd_replies: style byte, then what a server sends -----------------------


def rep(option, kind, data=b""):
    return struct.pack(">QIII", 0x3E889045565A9, option, kind, len(data)) + data


def chunk(flags, kind, cookie, length):
    return struct.pack(">IHHQI", 0x668E33EF, flags, kind, cookie, length)


def xchunk(flags, kind, cookie, offset, length):
    return struct.pack(">IHHQQQ", 0x6E8A278C, flags, kind, cookie, offset, length)


def simple(error, cookie):
    return struct.pack(">IIQ", 0x67446698, error, cookie)


DONE = 1
msg = b"read of 4096 bytes at offset 0 failed"
write("nbd_replies", "option-replies",
      bytes([1]) + rep(OPT_STRUCTURED_REPLY, 1)
      + rep(OPT_SET_META_CONTEXT, 4, struct.pack(">I", 1) + b"base:allocation")
      + rep(OPT_SET_META_CONTEXT, 1)
      + rep(OPT_GO, 3, struct.pack(">HQH", 0, 1 << 30, 0x1ED))
      + rep(OPT_GO, 1))
write("nbd_replies", "structured-read-and-status",
      bytes([1]) + chunk(0, 1, 7, 8 + 512) + struct.pack(">Q", 0) + bytes(512)
      + chunk(0, 2, 7, 12) + struct.pack(">QI", 512, 512)
      + chunk(DONE, 0, 7, 0)
      + chunk(DONE, 5, 8, 4 + 16) + struct.pack(">IIIII", 1, 4096, 0, 8192, 3)
      + chunk(DONE, 0x8001, 9, 6 + len(msg)) + struct.pack(">IH", 5, len(msg)) + msg)
write("nbd_replies", "extended-status-and-error-offset",
      bytes([2]) + xchunk(DONE, 6, 3, 0, 8 + 32)
      + struct.pack(">IIQQQQ", 1, 2, 65536, 0, 1 << 33, 3)
      + xchunk(DONE, 0x8002, 4, 4096, 14 + len(msg))
      + struct.pack(">IH", 5, len(msg)) + msg + struct.pack(">Q", 8192))
write("nbd_replies", "simple", bytes([0]) + simple(0, 1) + simple(22, 2) + bytes(16))
