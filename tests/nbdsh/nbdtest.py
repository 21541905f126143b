"""Helpers shared by the libnbd test scripts.

Every script is run as `/usr/bin/python3 SCRIPT URI [ARGS...]` by the Rust
interop tests (tests/interop/nbdsh.rs).  A script signals failure by raising
(an AssertionError or an nbd.Error), which makes python exit non-zero; the
Rust side shows the traceback.  Run with the system python: Debian's
python3-libnbd cannot be imported by another interpreter.
"""

import errno
import os
import random
import sys

import nbd

EXTENT_HOLE = 1  # base:allocation NBD_STATE_HOLE
EXTENT_ZERO = 2  # base:allocation NBD_STATE_ZERO


def uri_arg(index=1):
    if len(sys.argv) <= index:
        sys.exit("usage: %s URI ..." % sys.argv[0])
    return sys.argv[index]


def connect(uri, strict=True, meta=True, structured=True, opt_mode=False):
    """A connected handle.  strict=False turns off libnbd's client-side
    checks so that requests actually reach the server and the server's own
    answer is what gets tested."""
    h = nbd.NBD()
    h.set_handle_name(os.path.basename(sys.argv[0]))
    if not structured:
        h.set_request_structured_replies(False)
    if meta and structured:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    if opt_mode:
        h.set_opt_mode(True)
    # nbds:// URIs name a local certificate directory (tls-certificates).
    h.set_uri_allow_local_file(True)
    h.connect_uri(uri)
    if not strict:
        h.set_strict_mode(0)
    return h


def pattern(seed, n):
    """n deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(n)


def expect_error(what, errnos, fn, *args, **kwargs):
    """Calls fn and asserts it fails with an nbd.Error whose errno is one of
    errnos (an int or a tuple of ints).  Returns the error."""
    if isinstance(errnos, int):
        errnos = (errnos,)
    try:
        fn(*args, **kwargs)
    except nbd.Error as e:
        assert e.errnum in errnos, "%s: expected errno in %s, got %s (%s)" % (
            what,
            [errno.errorcode.get(x, x) for x in errnos],
            errno.errorcode.get(e.errnum, e.errnum),
            e.string,
        )
        return e
    raise AssertionError("%s: expected failure with %s, but it succeeded"
                         % (what, [errno.errorcode.get(x, x) for x in errnos]))


def assert_bytes(what, got, want):
    got = bytes(got)
    want = bytes(want)
    assert len(got) == len(want), "%s: got %d bytes, want %d" % (
        what, len(got), len(want))
    if got != want:
        i = next(i for i in range(len(got)) if got[i] != want[i])
        raise AssertionError("%s: first difference at byte %d: got %#04x, want %#04x"
                             % (what, i, got[i], want[i]))


def assert_zero(what, got):
    assert_bytes(what, got, bytes(len(got)))


def assert_usable(h, offset=0):
    """The connection still answers a normal read and flush."""
    h.pread(512, offset)
    if h.can_flush():
        h.flush()


def extents(h, offset, length, flags=0):
    """All base:allocation extents covering [offset, offset+length) as a
    list of (offset, length, flags), re-issuing block status for whatever a
    reply did not cover.  Checks the protocol rules on every reply."""
    result = []
    pos = offset
    end = offset + length
    while pos < end:
        chunk = []

        def cb(metacontext, off, entries, err):
            assert metacontext == nbd.CONTEXT_BASE_ALLOCATION, metacontext
            assert off == pos, "extent callback offset %d, want %d" % (off, pos)
            assert len(entries) >= 2 and len(entries) % 2 == 0, entries
            chunk.append(list(entries))
            return 0

        want = end - pos
        h.block_status(want, pos, cb, flags)
        assert len(chunk) == 1, "expected one base:allocation reply chunk, got %d" % len(chunk)
        entries = chunk[0]
        n = len(entries) // 2
        covered = 0
        for i in range(n):
            ln, fl = entries[2 * i], entries[2 * i + 1]
            assert ln > 0, "zero-length extent in %s" % entries
            if i < n - 1:
                assert covered + ln < want, \
                    "extents beyond the request before the last one: %s" % entries
            result.append((pos + covered, ln, fl))
            covered += ln
        if flags & nbd.CMD_FLAG_REQ_ONE:
            assert n == 1, "REQ_ONE reply has %d extents: %s" % (n, entries)
            assert covered <= want, "REQ_ONE extent %d exceeds request %d" % (covered, want)
        pos += covered
    # clip the last extent to the range asked for
    if result:
        o, ln, fl = result[-1]
        if o + ln > end:
            result[-1] = (o, end - o, fl)
    return result


def status_at(exts, offset):
    for o, ln, fl in exts:
        if o <= offset < o + ln:
            return fl
    raise AssertionError("offset %d not covered by %s" % (offset, exts))


def wait_all(h, cookies):
    """Polls until every cookie has completed; raises if any failed."""
    pending = set(cookies)
    while pending:
        done = [c for c in pending if h.aio_command_completed(c)]
        pending.difference_update(done)
        if pending and not done:
            h.poll(-1)
