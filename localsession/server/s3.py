"""S3 over the registry's files: the calls the SDK and a user make on model artifacts.

``serve`` answers S3's REST-XML protocol, path-style, under ``/s3`` (the printed
``AWS_ENDPOINT_URL_S3`` is ``http://HOST:PORT/s3``), for the objects runtime/packages/artifacts.py
exposes under each package's ``s3://`` URI:

- ``GET /s3/{bucket}?list-type=2`` ListObjectsV2 (prefix, delimiter, start-after,
  continuation-token, max-keys, encoding-type=url);
- ``HEAD /s3/{bucket}`` HeadBucket, ``GET /s3`` ListBuckets;
- ``HEAD|GET /s3/{bucket}/{key}`` HeadObject / GetObject (with ``Range: bytes=...``);
- ``DELETE /s3/{bucket}/{key}`` DeleteObject; ``POST /s3/{bucket}?delete`` DeleteObjects.

That is what ``delete_model_package(..., delete_artifacts=True)``, ``boto3``'s
``download_file`` and ``aws s3 cp --recursive`` / ``aws s3 ls`` use. Uploads are not served.

:func:`handle` is the whole protocol, free of HTTP plumbing: it takes an :class:`S3Request`
and returns an :class:`S3Response`, so an in-process carrier (botocore event hooks) can
route S3 calls to it as the HTTP routes here do.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from localsession.runtime.errors import ServiceError
from localsession.runtime.packages.artifacts import Artifacts, Listing, S3Object
from localsession.runtime.packages.registry import Registry

PREFIX = "/s3"
NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
#: ASCII digits (``\d`` takes any script's), few enough for ``int`` (5,000 of them raised)
_RANGE_RE = re.compile(r"^bytes=([0-9]{0,30})-([0-9]{0,30})\Z")
_CHUNK = 1 << 20


@dataclass
class S3Request:
    """One S3 request, path-style: ``bucket`` is "" for ``GET /`` (ListBuckets)."""

    method: str
    bucket: str
    key: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""


@dataclass
class S3Response:
    """What to answer: a status, headers and either ``body`` or a byte range of ``file``."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    #: (path, offset, length): the content of a GetObject, read lazily.
    file: tuple[Path, int, int] | None = None

    def content(self) -> bytes:
        """The whole body (reads ``file``'s range; for in-process carriers and tests)."""
        if self.file is None:
            return self.body
        path, offset, length = self.file
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)


def _xml(tag: str, children: list[ElementTree.Element], *, namespace: bool = True) -> bytes:
    root = ElementTree.Element(tag, xmlns=NAMESPACE) if namespace else ElementTree.Element(tag)
    root.extend(children)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root)


def _leaf(tag: str, text: str) -> ElementTree.Element:
    element = ElementTree.Element(tag)
    element.text = text
    return element


def _node(tag: str, *children: ElementTree.Element) -> ElementTree.Element:
    element = ElementTree.Element(tag)
    element.extend(children)
    return element


def _base_headers() -> dict[str, str]:
    request_id = uuid.uuid4().hex[:16].upper()
    return {"x-amz-request-id": request_id, "x-amz-id-2": request_id}


def error_response(exc: ServiceError, resource: str, *, head: bool = False) -> S3Response:
    """S3's XML error (HEAD answers carry no body, as S3's do)."""
    headers = {**_base_headers(), "content-type": "application/xml"}
    if head:
        return S3Response(exc.http_status, headers)
    body = _xml(
        "Error",
        [
            _leaf("Code", exc.code),
            _leaf("Message", exc.message),
            _leaf("Resource", resource),
            _leaf("RequestId", headers["x-amz-request-id"]),
        ],
        namespace=False,  # S3's errors carry none
    )
    return S3Response(exc.http_status, headers, body)


def _invalid(message: str) -> ServiceError:
    return ServiceError("InvalidArgument", message, 400)


def _object_headers(obj: S3Object) -> dict[str, str]:
    return {
        **_base_headers(),
        "content-type": "application/octet-stream",
        "etag": obj.etag,
        "last-modified": format_datetime(obj.last_modified, usegmt=True),
        "accept-ranges": "bytes",
    }


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(offset, length) of a ``Range: bytes=a-b`` header; None for the whole object."""
    match = _RANGE_RE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        return None  # S3 ignores a range it cannot parse
    first, last = match.groups()
    if first == "":
        length = min(int(last), size)
        start = size - length
    else:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
        length = end - start + 1
    if start >= size or length <= 0:
        raise ServiceError(
            "InvalidRange", f"The requested range {header!r} is not satisfiable ({size} B)", 416
        )
    return start, length


def _get_object(store: Artifacts, request: S3Request) -> S3Response:
    obj = store.head(request.bucket, request.key)
    headers = _object_headers(obj)
    if request.method == "HEAD":
        headers["content-length"] = str(obj.size)
        return S3Response(200, headers)
    wanted = _byte_range(request.headers.get("range", ""), obj.size)
    if wanted is None:
        headers["content-length"] = str(obj.size)
        return S3Response(200, headers, file=(obj.path, 0, obj.size))
    start, length = wanted
    headers["content-length"] = str(length)
    headers["content-range"] = f"bytes {start}-{start + length - 1}/{obj.size}"
    return S3Response(206, headers, file=(obj.path, start, length))


def _token(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


def _untoken(value: str) -> str:
    try:
        return base64.urlsafe_b64decode(value.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _invalid("The continuation token provided is incorrect") from None


def _list_objects(store: Artifacts, request: S3Request) -> S3Response:
    query = request.query
    if query.get("list-type") != "2":
        raise ServiceError(
            "NotImplemented", "Only ListObjectsV2 (list-type=2) is served for listing", 501
        )
    try:
        max_keys = int(query.get("max-keys", "1000"))
    except ValueError:
        raise _invalid("max-keys must be an integer") from None
    encode = query.get("encoding-type") == "url"
    if "encoding-type" in query and not encode:
        raise _invalid(f"Invalid Encoding Method specified in Request: {query['encoding-type']!r}")

    def text(value: str) -> str:
        return quote(value, safe="/~") if encode else value

    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    token = query.get("continuation-token")
    page: Listing = store.list(
        request.bucket,
        prefix,
        delimiter=delimiter,
        start_after=query.get("start-after", ""),
        token=_untoken(token) if token is not None else None,
        max_keys=max_keys,
    )
    children = [
        _leaf("Name", request.bucket),
        _leaf("Prefix", text(prefix)),
        _leaf("KeyCount", str(len(page.objects) + len(page.common_prefixes))),
        _leaf("MaxKeys", str(max_keys)),
        _leaf("IsTruncated", "true" if page.truncated else "false"),
    ]
    if delimiter:
        children.append(_leaf("Delimiter", text(delimiter)))
    if encode:
        children.append(_leaf("EncodingType", "url"))
    if token is not None:
        children.append(_leaf("ContinuationToken", token))
    if "start-after" in query:
        children.append(_leaf("StartAfter", text(query["start-after"])))
    if page.next_token is not None:
        children.append(_leaf("NextContinuationToken", _token(page.next_token)))
    for obj in page.objects:
        children.append(
            _node(
                "Contents",
                _leaf("Key", text(obj.key)),
                _leaf("LastModified", obj.last_modified.strftime("%Y-%m-%dT%H:%M:%S.000Z")),
                _leaf("ETag", obj.etag),
                _leaf("Size", str(obj.size)),
                _leaf("StorageClass", "STANDARD"),
            )
        )
    for common in page.common_prefixes:
        children.append(_node("CommonPrefixes", _leaf("Prefix", text(common))))
    headers = {**_base_headers(), "content-type": "application/xml"}
    return S3Response(200, headers, _xml("ListBucketResult", children))


def _delete_objects(store: Artifacts, request: S3Request) -> S3Response:
    try:
        root = ElementTree.fromstring(request.body)
    except ElementTree.ParseError as exc:
        raise ServiceError("MalformedXML", f"The Delete body is not XML: {exc}", 400) from None
    local = lambda element: element.tag.rpartition("}")[2]  # noqa: E731
    if local(root) != "Delete":
        raise ServiceError("MalformedXML", "The body must be a <Delete> document", 400)
    keys: list[str] = []
    quiet = False
    for child in root:
        if local(child) == "Quiet":
            quiet = (child.text or "").strip().lower() == "true"
        elif local(child) == "Object":
            key = next((c.text for c in child if local(c) == "Key"), None)
            if not key:
                raise ServiceError("MalformedXML", "Every <Object> needs a <Key>", 400)
            keys.append(key)
    if not 1 <= len(keys) <= 1000:
        raise ServiceError("MalformedXML", f"A Delete names 1-1000 objects, not {len(keys)}", 400)
    results = []
    for key in keys:
        store.delete(request.bucket, key)  # an absent key counts as deleted, as in S3
        if not quiet:
            results.append(_node("Deleted", _leaf("Key", key)))
    headers = {**_base_headers(), "content-type": "application/xml"}
    return S3Response(200, headers, _xml("DeleteResult", results))


def _list_buckets(store: Artifacts) -> S3Response:
    buckets = sorted(
        {
            info.location().removeprefix("s3://").partition("/")[0]
            for info, _ in store.registry.artifact_dirs()
        }
    )
    entries = [
        _node("Bucket", _leaf("Name", name), _leaf("CreationDate", "1970-01-01T00:00:00.000Z"))
        for name in buckets
    ]
    body = _xml(
        "ListAllMyBucketsResult",
        [_node("Owner", _leaf("ID", "localsession")), _node("Buckets", *entries)],
    )
    return S3Response(200, {**_base_headers(), "content-type": "application/xml"}, body)


def handle(store: Artifacts, request: S3Request) -> S3Response:
    """Answer one S3 request (blocking: reads and hashes files)."""
    resource = f"/{request.bucket}/{request.key}" if request.bucket else "/"
    try:
        method, has_key = request.method.upper(), bool(request.key)
        if not request.bucket:
            if method == "GET":
                return _list_buckets(store)
        elif has_key and method in ("GET", "HEAD"):
            return _get_object(
                store,
                S3Request(method, request.bucket, request.key, request.query, request.headers),
            )
        elif has_key and method == "DELETE":
            store.delete(request.bucket, request.key)
            return S3Response(204, _base_headers())
        elif not has_key and method == "HEAD":
            return S3Response(200, {**_base_headers(), "x-amz-bucket-region": "us-east-1"})
        elif not has_key and method == "GET":
            return _list_objects(store, request)
        elif not has_key and method == "POST" and "delete" in request.query:
            return _delete_objects(store, request)
        raise ServiceError(
            "NotImplemented",
            f"{method} {resource} is not an S3 operation this server implements (it serves "
            "ListObjectsV2, HeadBucket, HeadObject, GetObject, DeleteObject, DeleteObjects)",
            501,
        )
    except ServiceError as exc:
        return error_response(exc, resource, head=request.method.upper() == "HEAD")


def _stream(path: Path, offset: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        handle.seek(offset)
        while length > 0:
            block = handle.read(min(_CHUNK, length))
            if not block:
                return
            length -= len(block)
            yield block


def routes(registry: Callable[[], Registry]) -> list[Route]:
    """The S3 routes over the registry ``registry()`` returns (opened on first use)."""
    stores: dict[int, Artifacts] = {}

    def store() -> Artifacts:
        current = registry()
        if id(current) not in stores:
            stores.clear()
            stores[id(current)] = Artifacts(current)
        return stores[id(current)]

    async def endpoint(request: Request) -> Response:
        params: dict[str, Any] = request.path_params
        s3_request = S3Request(
            method=request.method,
            bucket=str(params.get("bucket", "")),
            key=str(params.get("key", "")),
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.body(),
        )
        answer = await run_in_threadpool(lambda: handle(store(), s3_request))
        if answer.file is None or request.method == "HEAD":
            return Response(answer.body, answer.status, answer.headers)
        path, offset, length = answer.file
        return StreamingResponse(_stream(path, offset, length), answer.status, answer.headers)

    methods = ["GET", "HEAD", "DELETE", "POST"]
    return [
        Route(PREFIX, endpoint, methods=["GET"]),
        Route(f"{PREFIX}/", endpoint, methods=["GET"]),
        Route(f"{PREFIX}/{{bucket}}", endpoint, methods=methods),
        Route(f"{PREFIX}/{{bucket}}/", endpoint, methods=methods),
        Route(f"{PREFIX}/{{bucket}}/{{key:path}}", endpoint, methods=methods),
    ]
