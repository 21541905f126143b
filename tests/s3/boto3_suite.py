"""boto3 against a running `sluice serve --s3`: one group of checks per
run, named on the command line. The endpoint and keys come from the
environment (S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, and S3_CA, the
CA certificate of an https endpoint). Each group
prints `ok GROUP` at the end; any failure is an exception and a non-zero
exit, its traceback on stderr.

Run by tests/interop/s3.rs; boto3 sends aws-chunked bodies with trailing
CRC checksums by default (1.36 and later), so every put here is one."""

import datetime
import hashlib
import os
import sys

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError


def client(secret=None, signature_version=None):
    return boto3.client(
        "s3",
        endpoint_url=os.environ["S3_ENDPOINT"],
        aws_access_key_id=os.environ["S3_ACCESS_KEY"],
        aws_secret_access_key=secret or os.environ["S3_SECRET_KEY"],
        region_name="us-east-1",
        verify=os.environ.get("S3_CA", True),
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            signature_version=signature_version,
        ),
    )


def error_code(call, *args, **kwargs):
    """The S3 error code (or HTTP status, for HEAD) `call` fails with."""
    try:
        call(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"]
    raise AssertionError(f"{call.__name__} succeeded, expected an error")


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def buckets(s3):
    eq([b["Name"] for b in s3.list_buckets()["Buckets"]], [], "no buckets yet")
    s3.create_bucket(Bucket="alpha")
    s3.create_bucket(Bucket="beta")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    eq(names, ["alpha", "beta"], "buckets listed")
    s3.head_bucket(Bucket="alpha")
    eq(error_code(s3.head_bucket, Bucket="gamma"), "404", "head of a missing bucket")
    eq(error_code(s3.create_bucket, Bucket="alpha"), "BucketAlreadyOwnedByYou", "bucket twice")
    s3.put_object(Bucket="alpha", Key="k", Body=b"x")
    eq(error_code(s3.delete_bucket, Bucket="alpha"), "BucketNotEmpty", "delete of a full bucket")
    s3.delete_object(Bucket="alpha", Key="k")
    s3.delete_bucket(Bucket="alpha")
    eq([b["Name"] for b in s3.list_buckets()["Buckets"]], ["beta"], "after delete")
    eq(error_code(s3.delete_bucket, Bucket="alpha"), "NoSuchBucket", "delete twice")
    eq(error_code(s3.create_bucket, Bucket="Bad_Name"), "InvalidBucketName", "bad name")


def objects(s3):
    s3.create_bucket(Bucket="data")
    sizes = [0, 1, 4095, 4096, 1 << 20, (5 << 20) + 3, 9 << 20]
    for i, size in enumerate(sizes):
        body = os.urandom(size)
        key = f"dir/sub/obj-{i}"
        r = s3.put_object(
            Bucket="data",
            Key=key,
            Body=body,
            ContentType="application/x-test",
            CacheControl="max-age=60",
            Metadata={"colour": "blue", "Owner": "me"},
        )
        want = hashlib.md5(body).hexdigest()
        eq(r["ETag"], f'"{want}"', f"etag of put {key}")
        got = s3.get_object(Bucket="data", Key=key)
        eq(got["Body"].read(), body, f"body of {key}")
        eq(got["ETag"], f'"{want}"', f"etag of get {key}")
        eq(got["ContentType"], "application/x-test", "content type")
        eq(got["CacheControl"], "max-age=60", "cache control")
        eq(got["Metadata"], {"colour": "blue", "owner": "me"}, "user metadata")
        head = s3.head_object(Bucket="data", Key=key)
        eq(head["ContentLength"], size, "head size")
        eq(head["Metadata"], {"colour": "blue", "owner": "me"}, "head metadata")
    body = bytes(range(256)) * 64
    s3.put_object(Bucket="data", Key="ranged", Body=body)
    for rng, want in [
        ("bytes=0-9", body[0:10]),
        ("bytes=100-", body[100:]),
        ("bytes=-5", body[-5:]),
        ("bytes=16380-99999", body[16380:]),
    ]:
        r = s3.get_object(Bucket="data", Key="ranged", Range=rng)
        eq(r["Body"].read(), want, f"range {rng}")
        eq(r["ResponseMetadata"]["HTTPStatusCode"], 206, f"status of {rng}")
    eq(error_code(s3.get_object, Bucket="data", Key="ranged", Range="bytes=99999-"), "InvalidRange", "range past the end")
    s3.delete_object(Bucket="data", Key="ranged")
    eq(error_code(s3.get_object, Bucket="data", Key="ranged"), "NoSuchKey", "deleted key")
    s3.delete_object(Bucket="data", Key="ranged")  # deleting again is fine
    eq(error_code(s3.get_object, Bucket="nope", Key="k"), "NoSuchBucket", "missing bucket")
    eq(error_code(s3.put_object, Bucket="nope", Key="k", Body=b""), "NoSuchBucket", "put to a missing bucket")


def conditional(s3):
    s3.create_bucket(Bucket="cond")
    etag = s3.put_object(Bucket="cond", Key="k", Body=b"hello")["ETag"]
    eq(s3.get_object(Bucket="cond", Key="k", IfMatch=etag)["Body"].read(), b"hello", "If-Match hit")
    eq(error_code(s3.get_object, Bucket="cond", Key="k", IfMatch='"0000"'), "PreconditionFailed", "If-Match miss")
    eq(error_code(s3.get_object, Bucket="cond", Key="k", IfNoneMatch=etag), "304", "If-None-Match hit")
    eq(s3.get_object(Bucket="cond", Key="k", IfNoneMatch='"0000"')["Body"].read(), b"hello", "If-None-Match miss")
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    earlier = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    eq(error_code(s3.get_object, Bucket="cond", Key="k", IfModifiedSince=later), "304", "If-Modified-Since later")
    eq(s3.get_object(Bucket="cond", Key="k", IfModifiedSince=earlier)["Body"].read(), b"hello", "If-Modified-Since earlier")
    eq(error_code(s3.head_object, Bucket="cond", Key="k", IfMatch='"0000"'), "412", "HEAD If-Match miss")


def listing(s3):
    s3.create_bucket(Bucket="lst")
    keys = [f"p/{i:04d}" for i in range(2500)] + ["a", "b/1", "b/2", "c/x/1", "z"]
    for k in keys:
        s3.put_object(Bucket="lst", Key=k, Body=b"")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="lst", Prefix="p/")
    got = [o["Key"] for page in pages for o in page.get("Contents", [])]
    eq(got, sorted(k for k in keys if k.startswith("p/")), "v2 paged through 2500 keys")
    pages = s3.get_paginator("list_objects").paginate(Bucket="lst", Prefix="p/", PaginationConfig={"PageSize": 700})
    got = [o["Key"] for page in pages for o in page.get("Contents", [])]
    eq(len(got), 2500, "v1 paged through 2500 keys")
    r = s3.list_objects_v2(Bucket="lst", Delimiter="/")
    eq([o["Key"] for o in r["Contents"]], ["a", "z"], "keys at the top")
    eq([p["Prefix"] for p in r["CommonPrefixes"]], ["b/", "c/", "p/"], "common prefixes")
    r = s3.list_objects_v2(Bucket="lst", Delimiter="/", MaxKeys=2)
    eq(r["IsTruncated"], True, "truncated at 2")
    eq([o["Key"] for o in r["Contents"]] + [p["Prefix"] for p in r["CommonPrefixes"]], ["a", "b/"], "first two")
    r = s3.list_objects_v2(Bucket="lst", Delimiter="/", MaxKeys=2, ContinuationToken=r["NextContinuationToken"])
    eq([p["Prefix"] for p in r.get("CommonPrefixes", [])], ["c/", "p/"], "next two")
    r = s3.list_objects_v2(Bucket="lst", StartAfter="p/2497")
    eq([o["Key"] for o in r["Contents"]], ["p/2498", "p/2499", "z"], "start-after")
    r = s3.list_objects(Bucket="lst", Prefix="c/", Delimiter="/")
    eq([p["Prefix"] for p in r["CommonPrefixes"]], ["c/x/"], "v1 common prefixes under c/")
    eq(s3.list_objects_v2(Bucket="lst", Prefix="nothing").get("KeyCount"), 0, "empty prefix")


def copy_delete(s3):
    s3.create_bucket(Bucket="src")
    s3.create_bucket(Bucket="dst")
    body = os.urandom(6 << 20)
    s3.put_object(Bucket="src", Key="orig", Body=body, ContentType="text/x", Metadata={"m": "1"})
    r = s3.copy_object(Bucket="dst", Key="copy", CopySource={"Bucket": "src", "Key": "orig"})
    eq(r["CopyObjectResult"]["ETag"], f'"{hashlib.md5(body).hexdigest()}"', "copy etag")
    got = s3.get_object(Bucket="dst", Key="copy")
    eq(got["Body"].read(), body, "copied body")
    eq((got["ContentType"], got["Metadata"]), ("text/x", {"m": "1"}), "copied metadata")
    s3.copy_object(
        Bucket="dst", Key="replaced", CopySource="src/orig",
        MetadataDirective="REPLACE", Metadata={"n": "2"}, ContentType="text/y",
    )
    got = s3.head_object(Bucket="dst", Key="replaced")
    eq((got["ContentType"], got["Metadata"]), ("text/y", {"n": "2"}), "replaced metadata")
    eq(error_code(s3.copy_object, Bucket="dst", Key="x", CopySource="src/missing"), "NoSuchKey", "copy of a missing key")
    for k in ["a", "b", "c"]:
        s3.put_object(Bucket="dst", Key=k, Body=b"1")
    r = s3.delete_objects(Bucket="dst", Delete={"Objects": [{"Key": k} for k in ["a", "b", "never"]]})
    eq(sorted(d["Key"] for d in r["Deleted"]), ["a", "b", "never"], "multi-delete")
    left = [o["Key"] for o in s3.list_objects_v2(Bucket="dst")["Contents"]]
    eq(left, ["c", "copy", "replaced"], "left after multi-delete")


def errors(s3):
    s3.create_bucket(Bucket="err")
    bad = client(secret="not-the-secret")
    eq(error_code(bad.list_buckets), "SignatureDoesNotMatch", "wrong secret")
    eq(error_code(bad.put_object, Bucket="err", Key="k", Body=b"1"), "SignatureDoesNotMatch", "wrong secret on put")
    eq(error_code(s3.get_object, Bucket="err", Key="none"), "NoSuchKey", "missing key")
    eq(error_code(s3.get_object, Bucket="none", Key="none"), "NoSuchBucket", "missing bucket")
    eq(error_code(s3.list_objects_v2, Bucket="none"), "NoSuchBucket", "list of a missing bucket")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "err", "Key": "p"}, ExpiresIn=60)
    s3.put_object(Bucket="err", Key="p", Body=b"presigned")
    import urllib.error
    import urllib.request
    eq(urllib.request.urlopen(url).read(), b"presigned", "presigned GET")
    # Presigned URLs whose expiry has passed, signed two hours ago for 60
    # seconds (botocore's clock set back, no sleeping): Signature V4
    # (X-Amz-Date + X-Amz-Expires) and V2 (Expires, what boto3 presigns
    # with by default).
    import unittest.mock
    now = datetime.datetime.now(datetime.timezone.utc)
    past = now - datetime.timedelta(hours=2)
    v4 = client(signature_version="s3v4")
    with unittest.mock.patch("botocore.auth.get_current_datetime", return_value=past.replace(tzinfo=None)):
        old_v4 = v4.generate_presigned_url("get_object", Params={"Bucket": "err", "Key": "p"}, ExpiresIn=60)
    with unittest.mock.patch("botocore.auth.time.time", return_value=past.timestamp()):
        old_v2 = s3.generate_presigned_url("get_object", Params={"Bucket": "err", "Key": "p"}, ExpiresIn=60)
    if past.strftime("X-Amz-Date=%Y%m%dT%H%M%SZ") not in old_v4:
        raise AssertionError(f"the V4 URL was not signed in the past: {old_v4}")
    if f"Expires={int(past.timestamp()) + 60}" not in old_v2:
        raise AssertionError(f"the V2 URL does not expire in the past: {old_v2}")
    for what, url in [("V4", old_v4), ("V2", old_v2)]:
        try:
            urllib.request.urlopen(url)
            raise AssertionError(f"an expired {what} presigned URL was served")
        except urllib.error.HTTPError as e:
            s3_error(e.code, e.read(), 403, "AccessDenied", f"an expired {what} presigned GET")
    # The server is still up, and fresh presigned URLs work.
    for what, c in [("V4", v4), ("V2", s3)]:
        fresh = c.generate_presigned_url("get_object", Params={"Bucket": "err", "Key": "p"}, ExpiresIn=60)
        eq(urllib.request.urlopen(fresh).read(), b"presigned", f"a fresh {what} presigned GET after the expired ones")


def chunked(s3):
    """aws-chunked bodies with a trailing CRC checksum, as boto3 sends
    them over TLS: forced here over plain HTTP by letting botocore's
    checksum code see an https URL."""
    import urllib.parse

    import botocore.httpchecksum as hc

    hc.urlparse = lambda url: urllib.parse.urlparse(url.replace("http://", "https://", 1))
    s3.create_bucket(Bucket="chunks")
    seen = []
    s3.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: seen.append(request.headers.get("Content-Encoding")),
    )
    for size in [0, 1, 70000, (9 << 20) + 7]:
        body = os.urandom(size)
        r = s3.put_object(Bucket="chunks", Key=f"c{size}", Body=body)
        eq(r["ETag"], f'"{hashlib.md5(body).hexdigest()}"', f"etag of a chunked put of {size}")
        got = s3.get_object(Bucket="chunks", Key=f"c{size}")
        eq(got["Body"].read(), body, f"chunked body of {size}")
        eq(got.get("ContentEncoding"), None, "aws-chunked is not the object's encoding")
    s3.put_object(Bucket="chunks", Key="gz", Body=b"x", ContentEncoding="gzip")
    eq(s3.head_object(Bucket="chunks", Key="gz").get("ContentEncoding"), "gzip", "own encoding kept")
    if not seen or any(e is None or b"aws-chunked" not in e for e in seen):
        raise AssertionError(f"the puts were not aws-chunked: {seen}")


def multipart(s3):
    s3.create_bucket(Bucket="mpu")
    up = s3.create_multipart_upload(Bucket="mpu", Key="big/one", ContentType="video/x", Metadata={"k": "v"})
    uid = up["UploadId"]
    bodies = [os.urandom(5 << 20), os.urandom((5 << 20) + 1), os.urandom(123)]
    etags = []
    for i, body in enumerate(bodies, 1):
        r = s3.upload_part(Bucket="mpu", Key="big/one", UploadId=uid, PartNumber=i, Body=body)
        eq(r["ETag"], f'"{hashlib.md5(body).hexdigest()}"', f"part {i} etag")
        etags.append(r["ETag"])
    # A part sent again replaces the first one.
    r = s3.upload_part(Bucket="mpu", Key="big/one", UploadId=uid, PartNumber=3, Body=bodies[2])
    eq(error_code(s3.head_object, Bucket="mpu", Key="big/one"), "404", "not visible before complete")
    parts = s3.list_parts(Bucket="mpu", Key="big/one", UploadId=uid)["Parts"]
    eq([(p["PartNumber"], p["Size"]) for p in parts], [(1, 5 << 20), (2, (5 << 20) + 1), (3, 123)], "list parts")
    uploads = s3.list_multipart_uploads(Bucket="mpu")["Uploads"]
    eq([(u["Key"], u["UploadId"]) for u in uploads], [("big/one", uid)], "list uploads")
    listed = [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]
    eq(error_code(s3.complete_multipart_upload, Bucket="mpu", Key="big/one", UploadId=uid,
                  MultipartUpload={"Parts": list(reversed(listed))}), "InvalidPartOrder", "descending parts")
    bad = [dict(p) for p in listed]
    bad[1]["ETag"] = '"00000000000000000000000000000000"'
    eq(error_code(s3.complete_multipart_upload, Bucket="mpu", Key="big/one", UploadId=uid,
                  MultipartUpload={"Parts": bad}), "InvalidPart", "wrong part etag")
    r = s3.complete_multipart_upload(Bucket="mpu", Key="big/one", UploadId=uid, MultipartUpload={"Parts": listed})
    digests = b"".join(hashlib.md5(b).digest() for b in bodies)
    want = f'"{hashlib.md5(digests).hexdigest()}-3"'
    eq(r["ETag"], want, "multipart etag")
    got = s3.get_object(Bucket="mpu", Key="big/one")
    eq(got["Body"].read(), b"".join(bodies), "multipart body")
    eq((got["ETag"], got["ContentType"], got["Metadata"]), (want, "video/x", {"k": "v"}), "multipart attributes")
    eq(s3.list_multipart_uploads(Bucket="mpu").get("Uploads", []), [], "no uploads left")
    eq(error_code(s3.list_parts, Bucket="mpu", Key="big/one", UploadId=uid), "NoSuchUpload", "completed upload gone")
    # A part under 5 MiB that is not the last.
    uid = s3.create_multipart_upload(Bucket="mpu", Key="small")["UploadId"]
    small = [s3.upload_part(Bucket="mpu", Key="small", UploadId=uid, PartNumber=i, Body=b"x" * 100)["ETag"] for i in (1, 2)]
    eq(error_code(s3.complete_multipart_upload, Bucket="mpu", Key="small", UploadId=uid,
                  MultipartUpload={"Parts": [{"PartNumber": i, "ETag": e} for i, e in enumerate(small, 1)]}),
       "EntityTooSmall", "a small part")
    s3.abort_multipart_upload(Bucket="mpu", Key="small", UploadId=uid)
    eq(error_code(s3.list_parts, Bucket="mpu", Key="small", UploadId=uid), "NoSuchUpload", "aborted upload gone")
    eq(error_code(s3.head_object, Bucket="mpu", Key="small"), "404", "an aborted upload leaves no object")
    # boto3's own transfer manager: multipart above its threshold.
    from boto3.s3.transfer import TransferConfig
    import io
    body = os.urandom(13 << 20)
    cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    s3.upload_fileobj(io.BytesIO(body), "mpu", "managed", Config=cfg)
    out = io.BytesIO()
    s3.download_fileobj("mpu", "managed", out, Config=cfg)
    eq(out.getvalue(), body, "transfer manager round trip")
    eq(s3.head_object(Bucket="mpu", Key="managed")["ETag"].endswith('-3"'), True, "three parts")


def https(s3):
    """Over TLS, where boto3 sends aws-chunked bodies with trailing
    checksums on its own, and a plain client is not answered."""
    import urllib.request

    s3.create_bucket(Bucket="tls")
    for size in [0, 100, (6 << 20) + 1]:
        body = os.urandom(size)
        etag = s3.put_object(Bucket="tls", Key=f"k{size}", Body=body)["ETag"]
        eq(etag, f'"{hashlib.md5(body).hexdigest()}"', f"etag over TLS ({size})")
        eq(s3.get_object(Bucket="tls", Key=f"k{size}")["Body"].read(), body, f"body over TLS ({size})")
    plain = os.environ["S3_ENDPOINT"].replace("https://", "http://")
    try:
        urllib.request.urlopen(plain + "/", timeout=10)
    except Exception:  # refused: the TLS handshake fails on plain HTTP
        pass
    else:
        raise AssertionError("plain HTTP answered under --tls require")


def vanish(s3):
    """A client that sends the headers and part of a signed body, then
    goes away: the object is never visible, and the key can be put again
    once the server has dropped the half-written one."""
    import socket
    import time
    import urllib.parse

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def half_put(key):
        """A signed PUT of 12 MiB that sends 5 MiB; the open socket."""
        body = os.urandom(12 << 20)
        url = os.environ["S3_ENDPOINT"] + "/gone/" + key
        req = AWSRequest(method="PUT", url=url, data=body, headers={"Content-Length": str(len(body))})
        creds = Credentials(os.environ["S3_ACCESS_KEY"], os.environ["S3_SECRET_KEY"])
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
        u = urllib.parse.urlparse(url)
        lines = [f"PUT {u.path} HTTP/1.1", f"Host: {u.netloc}"]
        lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
        sock = socket.create_connection((u.hostname, u.port))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body[: 5 << 20])
        return sock

    s3.create_bucket(Bucket="gone")
    sock = half_put("half")
    eq(error_code(s3.head_object, Bucket="gone", Key="half"), "404", "invisible while its body comes")
    sock.close()
    # Over a key that exists: the old object stays, whole.
    s3.put_object(Bucket="gone", Key="kept", Body=b"old")
    sock = half_put("kept")
    eq(s3.get_object(Bucket="gone", Key="kept")["Body"].read(), b"old", "old while the new body comes")
    sock.close()
    eq(s3.get_object(Bucket="gone", Key="kept")["Body"].read(), b"old", "old after the client left")
    eq(error_code(s3.head_object, Bucket="gone", Key="half"), "404", "invisible after the client left")
    eq([o["Key"] for o in s3.list_objects_v2(Bucket="gone")["Contents"]], ["kept"], "the half put not listed")
    # The server drops the half-written object as it notices; until then
    # a put of the same key is refused, after it succeeds.
    deadline = time.monotonic() + 30
    while True:
        try:
            s3.put_object(Bucket="gone", Key="half", Body=b"whole")
            break
        except ClientError as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"the abandoned put was never dropped: {e}")
            time.sleep(0.05)
    eq(s3.get_object(Bucket="gone", Key="half")["Body"].read(), b"whole", "the key put again")


def overwrite(s3):
    s3.create_bucket(Bucket="owr")
    s3.put_object(Bucket="owr", Key="k", Body=b"first", Metadata={"old": "1"}, ContentType="text/a")
    etag = s3.put_object(Bucket="owr", Key="k", Body=b"second", Metadata={"new": "2"})["ETag"]
    got = s3.get_object(Bucket="owr", Key="k")
    eq(got["Body"].read(), b"second", "overwritten")
    eq((got["ETag"], got["Metadata"]), (etag, {"new": "2"}), "the new version's attributes only")
    if got.get("ContentType") == "text/a":
        raise AssertionError("the old version's content type is left")
    # A copy onto itself with new metadata (aws s3 cp --metadata-directive REPLACE).
    s3.copy_object(Bucket="owr", Key="k", CopySource="owr/k", MetadataDirective="REPLACE", Metadata={"n": "3"})
    got = s3.get_object(Bucket="owr", Key="k")
    eq((got["Body"].read(), got["Metadata"]), (b"second", {"n": "3"}), "copied onto itself")
    # Many versions of one key: always the last one.
    for i in range(5):
        s3.put_object(Bucket="owr", Key="k", Body=f"v{i}".encode())
    eq(s3.get_object(Bucket="owr", Key="k")["Body"].read(), b"v4", "the last put wins")
    eq([o["Key"] for o in s3.list_objects_v2(Bucket="owr")["Contents"]], ["k"], "one key listed")


def part_copy(s3):
    """UploadPartCopy: a whole object, and a byte range of one, as parts."""
    s3.create_bucket(Bucket="pcopy")
    src = os.urandom((7 << 20) + 5)
    src_etag = s3.put_object(Bucket="pcopy", Key="src", Body=src)["ETag"]
    uid = s3.create_multipart_upload(Bucket="pcopy", Key="joined")["UploadId"]
    whole = s3.upload_part_copy(Bucket="pcopy", Key="joined", UploadId=uid, PartNumber=1,
                                CopySource={"Bucket": "pcopy", "Key": "src"})
    eq(whole["CopyPartResult"]["ETag"], f'"{hashlib.md5(src).hexdigest()}"', "etag of a whole copied part")
    ranged = s3.upload_part_copy(Bucket="pcopy", Key="joined", UploadId=uid, PartNumber=2,
                                 CopySource="pcopy/src", CopySourceRange=f"bytes=1000-{(5 << 20) + 999}",
                                 CopySourceIfMatch=src_etag)
    middle = src[1000:(5 << 20) + 1000]
    eq(ranged["CopyPartResult"]["ETag"], f'"{hashlib.md5(middle).hexdigest()}"', "etag of a ranged part")
    tail = s3.upload_part_copy(Bucket="pcopy", Key="joined", UploadId=uid, PartNumber=3,
                               CopySource="pcopy/src", CopySourceRange="bytes=0-0")
    eq(tail["CopyPartResult"]["ETag"], f'"{hashlib.md5(src[:1]).hexdigest()}"', "a one-byte range")
    parts = s3.list_parts(Bucket="pcopy", Key="joined", UploadId=uid)["Parts"]
    eq([(p["PartNumber"], p["Size"]) for p in parts], [(1, len(src)), (2, 5 << 20), (3, 1)], "copied parts listed")
    etags = [whole["CopyPartResult"]["ETag"], ranged["CopyPartResult"]["ETag"], tail["CopyPartResult"]["ETag"]]
    s3.complete_multipart_upload(Bucket="pcopy", Key="joined", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]})
    eq(s3.get_object(Bucket="pcopy", Key="joined")["Body"].read(), src + middle + src[:1], "the joined object")
    # What a copied part cannot be.
    uid = s3.create_multipart_upload(Bucket="pcopy", Key="bad")["UploadId"]
    copy = lambda **kw: s3.upload_part_copy(Bucket="pcopy", Key="bad", UploadId=uid, PartNumber=1, **kw)
    eq(error_code(copy, CopySource="pcopy/src", CopySourceRange=f"bytes=0-{len(src)}"), "InvalidRange", "a range past the end")
    eq(error_code(copy, CopySource="pcopy/src", CopySourceRange="bytes=10-"), "InvalidArgument", "an open range")
    eq(error_code(copy, CopySource="pcopy/missing"), "NoSuchKey", "a missing source")
    eq(error_code(copy, CopySource="nope/src"), "NoSuchBucket", "a source in a missing bucket")
    eq(error_code(copy, CopySource="pcopy/src", CopySourceIfMatch='"0000"'), "PreconditionFailed", "If-Match of the source")
    eq(error_code(copy, CopySource="pcopy/src", CopySourceIfNoneMatch=src_etag), "PreconditionFailed", "If-None-Match of the source")
    eq(error_code(s3.upload_part_copy, Bucket="pcopy", Key="bad", UploadId="0" * 32, PartNumber=1, CopySource="pcopy/src"),
       "NoSuchUpload", "a missing upload")
    eq(s3.list_parts(Bucket="pcopy", Key="bad", UploadId=uid).get("Parts", []), [], "no part left by the failures")


def signed(method, path, body=b"", headers=None):
    """A request signed with SigV4 (as botocore signs it), sent as is;
    (status, response body)."""
    import http.client
    import urllib.parse

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = os.environ["S3_ENDPOINT"] + path
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    creds = Credentials(os.environ["S3_ACCESS_KEY"], os.environ["S3_SECRET_KEY"])
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    target = u.path + ("?" + u.query if u.query else "")
    conn.request(method, target, body=body, headers=dict(req.headers.items()))
    r = conn.getresponse()
    out = (r.status, r.read())
    conn.close()
    return out


def s3_error(status, body, want_status, want_code, what):
    eq(status, want_status, f"status of {what}")
    if f"<Code>{want_code}</Code>".encode() not in body:
        raise AssertionError(f"{what}: no {want_code} error in {body[:500]!r}")


def raw(data, timeout=60):
    """Sends raw bytes on a new connection; what comes back until the
    server closes it (b"" if it resets it)."""
    import socket
    import urllib.parse

    u = urllib.parse.urlparse(os.environ["S3_ENDPOINT"])
    sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
    got = b""
    # The server may answer and close before it has taken every byte:
    # sending, shutting down and reading then each find the connection
    # gone (reset, broken pipe, not connected), which is an answer too.
    gone = (ConnectionResetError, BrokenPipeError, OSError)
    try:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except gone:
            pass
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                raise
            except gone:
                break
            if not chunk:
                break
            got += chunk
    finally:
        sock.close()
    return got


def bad_input(s3):
    """Malformed bodies, oversized headers and lists, unknown operations
    and bytes that are not HTTP: each a clear error, and the server
    keeps serving."""
    import base64

    s3.create_bucket(Bucket="bad")
    uid = s3.create_multipart_upload(Bucket="bad", Key="k")["UploadId"]
    etag = s3.upload_part(Bucket="bad", Key="k", UploadId=uid, PartNumber=1, Body=b"x")["ETag"]
    for body in [b"<CompleteMultipartUpload><Part><PartNumber>1</Part>", b"not xml", b"<a>" * 10000,
                 b"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber></Part></CompleteMultipartUpload>"]:
        status, got = signed("POST", f"/bad/k?uploadId={uid}", body)
        s3_error(status, got, 400, "MalformedXML", f"a complete with the body {body[:40]!r}")
    md5 = lambda b: base64.b64encode(hashlib.md5(b).digest()).decode()
    for body in [b"<Delete><Object><Key>k</Key></Object>", b"\x00\xff garbage", b"<Delete><Object></Delete>"]:
        status, got = signed("POST", "/bad?delete", body, {"Content-MD5": md5(body)})
        s3_error(status, got, 400, "MalformedXML", f"a multi-delete with the body {body[:40]!r}")
    # The upload is untouched by the bad completes.
    s3.complete_multipart_upload(Bucket="bad", Key="k", UploadId=uid,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    eq(s3.get_object(Bucket="bad", Key="k")["Body"].read(), b"x", "completed after the bad completes")
    # Lists longer than S3 takes.
    eq(error_code(s3.delete_objects, Bucket="bad", Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]}),
       "MalformedXML", "a multi-delete of 1001 keys")
    eq(s3.head_object(Bucket="bad", Key="k")["ContentLength"], 1, "nothing deleted by the refused multi-delete")
    eq(error_code(s3.put_object, Bucket="bad", Key="meta", Body=b"1", Metadata={"big": "v" * 3000}),
       "MetadataTooLarge", "3000 bytes of user metadata")
    eq(error_code(s3.head_object, Bucket="bad", Key="meta"), "404", "no object from a refused put")
    # Oversized headers: too many, or one larger than the server reads.
    many = "".join(f"x-pad-{i}: {i}\r\n" for i in range(200))
    got = raw(f"GET / HTTP/1.1\r\nHost: s3\r\n{many}\r\n".encode())
    eq(got.split(b"\r\n")[0], b"HTTP/1.1 431 Request Header Fields Too Large", "200 headers")
    got = raw(b"GET / HTTP/1.1\r\nHost: s3\r\nx-big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    if got and not got.startswith(b"HTTP/1.1 431"):
        raise AssertionError(f"a 1 MiB header answered {got[:100]!r}")
    # Operations sluice does not do, and one no S3 has.
    versioning = b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"
    for method, path, body in [("GET", "/bad?lifecycle", b""), ("GET", "/bad?policy", b""),
                               ("GET", "/bad/k?torrent", b""), ("PUT", "/bad?versioning", versioning)]:
        status, got = signed(method, path, body)
        s3_error(status, got, 501, "NotImplemented", f"{method} {path}")
    status, got = signed("PATCH", "/bad/k", b"")
    s3_error(status, got, 501, "NotImplemented", "PATCH, a method no S3 operation has")
    # Not HTTP at all.
    got = raw(b"\x00\x01\x02 hello\r\n\r\n")
    if got and not got.startswith(b"HTTP/1.1 400"):
        raise AssertionError(f"garbage answered {got[:100]!r}")
    # Still serving, with everything as it was.
    eq([b["Name"] for b in s3.list_buckets()["Buckets"]], ["bad"], "buckets after the bad input")
    eq(s3.get_object(Bucket="bad", Key="k")["Body"].read(), b"x", "the object after the bad input")


GROUPS = {
    f.__name__: f
    for f in [buckets, objects, conditional, listing, copy_delete, errors, chunked, multipart, https, vanish, overwrite,
              part_copy, bad_input]
}

if __name__ == "__main__":
    group = sys.argv[1]
    print(f"boto3 {boto3.__version__} botocore {botocore.__version__}", file=sys.stderr)
    GROUPS[group](client())
    print(f"ok {group}")
