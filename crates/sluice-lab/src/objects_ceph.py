"""The librados side of `sluice bench objects`' ceph group.

usage: python3 -c SCRIPT CONF POOL OSD_PID SECONDS ROUND
One JSON line per row on stdout: row, ops, bytes, wall_s, mean_us,
p50_us, p99_us, osd_cpu_s (null without an OSD pid), client_cpu_s.
Rows (the same operations the bench sends sluice):
  write-4k               4 KiB writes to 1024 existing objects, 16 in flight
  create+3attrs          a new object: write_full(4 KiB) + 3 xattrs, one op, 16 in flight
  read-1m, write-1m      whole 1 MiB objects (16 of them), 8 in flight
  scatter-256x4k-1req    256 scattered 4 KiB extents of a 16 MiB object, one ReadOp
  scatter-256x4k-256req  the same extents, 256 reads, 16 in flight
"""
import ctypes
import json
import os
import random
import sys
import threading
import time

import rados

CONF, POOL, OSD_PID = sys.argv[1], sys.argv[2], int(sys.argv[3])
SECS, ROUND = float(sys.argv[4]), int(sys.argv[5])
TICK = os.sysconf("SC_CLK_TCK")
KIB4, MIB = 4096, 1 << 20


def osd_cpu():
    if OSD_PID <= 0:
        return None
    f = open("/proc/%d/stat" % OSD_PID).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def self_cpu():
    t = os.times()
    return t.user + t.system


def emit(row, ops, nbytes, wall, c0, c1, s0, s1, lat):
    lat = sorted(lat) or [0.0]
    print(json.dumps({
        "row": row, "ops": ops, "bytes": nbytes, "wall_s": wall,
        "mean_us": sum(lat) / len(lat) * 1e6,
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
        "osd_cpu_s": None if c0 is None else c1 - c0,
        "client_cpu_s": s1 - s0,
    }), flush=True)


def windowed(row, window, nbytes, issue):
    """issue(i, done) starts op i and calls done(rv) when it completes;
    as many as `window` in flight until SECS have passed."""
    sem = threading.Semaphore(window)
    lock = threading.Lock()
    lat, errors = [], []
    c0, s0, t0 = osd_cpu(), self_cpu(), time.perf_counter()
    i = 0
    while time.perf_counter() - t0 < SECS:
        sem.acquire()
        start = time.perf_counter()

        def done(rv, start=start):
            with lock:
                lat.append(time.perf_counter() - start)
                if rv < 0:
                    errors.append(rv)
            sem.release()
        issue(i, done)
        i += 1
    for _ in range(window):
        sem.acquire()
    wall = time.perf_counter() - t0
    c1, s1 = osd_cpu(), self_cpu()
    if errors:
        raise SystemExit("%s: %d errors, first %d" % (row, len(errors), errors[0]))
    emit(row, i, i * nbytes, wall, c0, c1, s0, s1, lat)


# librados' C API for a ReadOp with many reads (the Python ReadOp has none).
lib = ctypes.CDLL("librados.so.2")
vp, c_size = ctypes.c_void_p, ctypes.c_size_t
lib.rados_create.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
lib.rados_conf_read_file.argtypes = [vp, ctypes.c_char_p]
lib.rados_connect.argtypes = [vp]
lib.rados_ioctx_create.argtypes = [vp, ctypes.c_char_p, ctypes.POINTER(vp)]
lib.rados_create_read_op.restype = vp
lib.rados_create_read_op.argtypes = []
lib.rados_read_op_read.argtypes = [vp, ctypes.c_uint64, c_size, ctypes.c_char_p,
                                   ctypes.POINTER(c_size), ctypes.POINTER(ctypes.c_int)]
lib.rados_read_op_read.restype = None
lib.rados_read_op_operate.argtypes = [vp, vp, ctypes.c_char_p, ctypes.c_int]
lib.rados_release_read_op.argtypes = [vp]
lib.rados_release_read_op.restype = None


def main():
    cluster = rados.Rados(conffile=CONF)
    cluster.connect()
    io = cluster.open_ioctx(POOL)
    cl, cio = vp(), vp()
    assert lib.rados_create(ctypes.byref(cl), None) == 0
    assert lib.rados_conf_read_file(cl, CONF.encode()) == 0
    assert lib.rados_connect(cl) == 0
    assert lib.rados_ioctx_create(cl, POOL.encode(), ctypes.byref(cio)) == 0

    small, big = os.urandom(KIB4), os.urandom(MIB)
    smalls = ["sb-4k.%d" % k for k in range(1024)]
    bigs = ["sb-1m.%d" % k for k in range(16)]
    try:
        io.stat("sb-scatter")  # written last: the setup of an earlier round
    except rados.ObjectNotFound:
        comps = [io.aio_write_full(n, small) for n in smalls]
        comps += [io.aio_write_full(n, big) for n in bigs]
        for c in comps:
            c.wait_for_complete()
        io.write_full("sb-scatter", os.urandom(16 * MIB))
    rng = random.Random(ROUND)
    blocks = list(range(16 * MIB // KIB4))
    rng.shuffle(blocks)
    extents = [(b * KIB4, KIB4) for b in blocks[:256]]
    xv = [os.urandom(16), os.urandom(32), os.urandom(64)]
    created = []

    def w4k(i, done):
        io.aio_write(smalls[i % 1024], small, 0,
                     oncomplete=lambda c: done(c.get_return_value()))

    def create3(i, done):
        name = "sb-c.%d.%d" % (ROUND, i)
        created.append(name)
        op = io.create_write_op()
        op.write_full(small)
        op.set_xattr("owner", xv[0])
        op.set_xattr("serial", xv[1])
        op.set_xattr("tag", xv[2])

        def cb(c, op=op):
            done(c.get_return_value())
        io.operate_aio_write_op(op, name, oncomplete=cb)

    def r1m(i, done):
        def cb(c, data):
            done(c.get_return_value() if len(data) == MIB else -5)
        io.aio_read(bigs[i % 16], MIB, 0, oncomplete=cb)

    def w1m(i, done):
        io.aio_write_full(bigs[i % 16], big,
                          oncomplete=lambda c: done(c.get_return_value()))

    def scatter_one():
        bufs = [ctypes.create_string_buffer(ln) for _, ln in extents]
        nread = [c_size() for _ in extents]
        prv = [ctypes.c_int() for _ in extents]
        op = lib.rados_create_read_op()
        for k, (off, ln) in enumerate(extents):
            lib.rados_read_op_read(op, off, ln, bufs[k], ctypes.byref(nread[k]),
                                   ctypes.byref(prv[k]))
        r = lib.rados_read_op_operate(op, cio, b"sb-scatter", 0)
        lib.rados_release_read_op(op)
        if r < 0 or any(n.value != KIB4 for n in nread):
            raise SystemExit("scatter read failed: %d" % r)

    def scatter_many():
        sem = threading.Semaphore(16)
        bad = []

        def cb(c, data):
            if len(data) != KIB4:
                bad.append(1)
            sem.release()
        for off, ln in extents:
            sem.acquire()
            io.aio_read("sb-scatter", ln, off, oncomplete=cb)
        for _ in range(16):
            sem.acquire()
        if bad:
            raise SystemExit("scatter reads failed")

    def serial(row, one):
        lat = []
        c0, s0, t0 = osd_cpu(), self_cpu(), time.perf_counter()
        while time.perf_counter() - t0 < SECS:
            t = time.perf_counter()
            one()
            lat.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        emit(row, len(lat), len(lat) * 256 * KIB4, wall, c0, osd_cpu(), s0, self_cpu(), lat)

    rows = [
        ("write-4k", lambda: windowed("write-4k", 16, KIB4, w4k)),
        ("create+3attrs", lambda: windowed("create+3attrs", 16, KIB4, create3)),
        ("read-1m", lambda: windowed("read-1m", 8, MIB, r1m)),
        ("write-1m", lambda: windowed("write-1m", 8, MIB, w1m)),
        ("scatter-256x4k-1req", lambda: serial("scatter-256x4k-1req", scatter_one)),
        ("scatter-256x4k-256req", lambda: serial("scatter-256x4k-256req", scatter_many)),
    ]
    k = ROUND % len(rows)
    for _, run in rows[k:] + rows[:k]:
        run()
    for name in created:
        io.aio_remove(name)
    io.close()
    cluster.shutdown()


main()
