"""The registry in S3 terms (runtime/packages/artifacts.py): URIs under the session's output path,
listing, heads, deletes, retained artifacts, and keys that must not escape a package. No
torch: packages are written by a plain function. References are the files on disk and
``hashlib``; ``server/s3.py``'s ``handle`` is driven directly, as an in-process carrier
would."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from localsession.runtime.errors import ServiceError
from localsession.runtime.packages.artifacts import Artifacts
from localsession.runtime.packages.registry import DEFAULT_S3_PREFIX, Registry, package_s3_uri
from localsession.server.s3 import S3Request, handle

FILES = {
    "adapter_model.safetensors": b"A" * 300,
    "adapter_config.json": b"{}",
    "merged/config.json": b'{"x": 1}',
    "merged/model.safetensors": bytes(range(256)) * 9,
}


def _write(folder: Path) -> None:
    for name, data in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _save(
    registry: Registry, output: str | None, session: str = "s1", region: str | None = None
) -> str:
    info = registry.create(
        "grp",
        kind="model",
        base_model="m",
        lora_rank=4,
        lora_alpha=8,
        description="",
        session=session,
        merged=True,
        write=_write,
        region=region,
        s3_output_path=output,
    )
    return info.arn


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("s3://bucket/out", "s3://bucket/out/s1/grp/3/"),
        ("s3://bucket/out/", "s3://bucket/out/s1/grp/3/"),
        ("s3://bucket//a//b/", "s3://bucket/a/b/s1/grp/3/"),
        ("s3://bucket", "s3://bucket/s1/grp/3/"),
        ("file:///tmp/x", f"{DEFAULT_S3_PREFIX}/grp/3/"),
        ("s3:///no-bucket", f"{DEFAULT_S3_PREFIX}/grp/3/"),
        (None, f"{DEFAULT_S3_PREFIX}/grp/3/"),
    ],
)
def test_package_uris_lie_under_the_output_path(output: str | None, expected: str) -> None:
    assert package_s3_uri(output, "s1", "grp", 3) == expected


def test_arns_take_the_callers_region(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    assert _save(registry, None).startswith("arn:aws:sagemaker:us-west-2:")
    arn = _save(registry, None, region="eu-west-3")
    assert arn.startswith("arn:aws:sagemaker:eu-west-3:000000000000:model-package/grp/2")
    assert registry.get(arn).arn == arn
    assert registry.create_group("made", "", "ap-south-1")["ModelPackageGroupArn"].startswith(
        "arn:aws:sagemaker:ap-south-1:"
    )


def test_list_head_get_and_delete(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    arn = _save(registry, "s3://bkt/out")
    store = Artifacts(registry)
    prefix = "out/s1/grp/1/"
    page = store.list("bkt", prefix)
    assert [o.key for o in page.objects] == sorted(prefix + k for k in FILES)
    for obj in page.objects:
        data = FILES[obj.key[len(prefix) :]]
        assert obj.size == len(data) and obj.etag == f'"{hashlib.md5(data).hexdigest()}"'
    assert store.list("bkt", "out/s1/").objects == page.objects  # a shorter prefix
    assert store.list("bkt", "out/s1/grp/1/merged/x").objects == []
    assert store.list("other", "").objects == []
    # pages of 2, resumed after the last key
    first = store.list("bkt", prefix, max_keys=2)
    assert first.truncated and first.next_token == first.objects[-1].key
    rest = store.list("bkt", prefix, token=first.next_token)
    assert [o.key for o in first.objects + rest.objects] == [o.key for o in page.objects]
    folded = store.list("bkt", prefix, delimiter="/")
    assert folded.common_prefixes == [prefix + "merged/"] and len(folded.objects) == 2
    assert store.head("bkt", prefix + "merged/config.json").size == len(FILES["merged/config.json"])

    for bad in (
        prefix + "package.json",
        prefix + "../1/adapter_config.json",
        prefix,
        prefix + "merged",
        prefix + "merged//config.json",
        "out/s1/grp/1",
    ):
        with pytest.raises(ServiceError) as err:
            store.head("bkt", bad)
        assert (err.value.code, err.value.http_status) == ("NoSuchKey", 404), bad
    with pytest.raises(ServiceError, match="max-keys"):
        store.list("bkt", prefix, max_keys=-1)

    assert store.delete("bkt", prefix + "merged/config.json")
    assert store.delete("bkt", prefix + "merged/model.safetensors")
    assert not (registry.path(arn) / "merged").exists()  # the emptied folder went too
    assert not store.delete("bkt", prefix + "merged/config.json")  # already gone
    assert registry.get(arn).arn == arn  # the package entry stays until it is deleted


def test_retained_artifacts_stay_at_their_uri_until_deleted(tmp_path: Path) -> None:
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    arn = _save(registry, "s3://bkt/out")
    kept, _ = registry.delete(arn, keep_artifacts=True)
    assert kept is not None and kept.parent == tmp_path / "retained"
    store = Artifacts(registry)
    keys = [o.key for o in store.list("bkt", "out/").objects]
    assert keys == sorted("out/s1/grp/1/" + k for k in FILES)
    for key in keys:
        assert store.delete("bkt", key)
    assert not kept.exists()  # the last object took the retained folder with it
    # a package emptied through S3 leaves nothing to retain on DeleteModelPackage
    arn = _save(registry, "s3://bkt/out")
    for obj in store.list("bkt", "out/").objects:
        store.delete("bkt", obj.key)
    assert registry.delete(arn, keep_artifacts=True) == (None, 0)


def test_the_protocol_handler_without_http(tmp_path: Path) -> None:
    """What an in-process carrier calls: server/s3.py's ``handle``."""
    registry = Registry(tmp_path, "us-west-2", "000000000000")
    _save(registry, "s3://bkt/out")
    store = Artifacts(registry)
    key = "out/s1/grp/1/merged/model.safetensors"
    got = handle(store, S3Request("GET", "bkt", key, headers={"range": "bytes=-5"}))
    assert got.status == 206 and got.content() == FILES["merged/model.safetensors"][-5:]
    listed = handle(
        store,
        S3Request("GET", "bkt", query={"list-type": "2", "prefix": "out/", "encoding-type": "url"}),
    )
    assert listed.status == 200 and listed.body.count(b"<Contents>") == len(FILES)
    for request, code in [
        (S3Request("GET", "bkt", query={"list-type": "1"}), b"NotImplemented"),
        (S3Request("GET", "bkt", query={"list-type": "2", "max-keys": "x"}), b"InvalidArgument"),
        (
            S3Request("GET", "bkt", query={"list-type": "2", "encoding-type": "b64"}),
            b"InvalidArgument",
        ),
        (S3Request("POST", "bkt", query={"delete": ""}, body=b"<Delete/>"), b"MalformedXML"),
        (S3Request("POST", "bkt", query={"delete": ""}, body=b"<Nope/>"), b"MalformedXML"),
        (S3Request("GET", "bkt", key, headers={"range": "bytes=99999-"}), b"InvalidRange"),
        (S3Request("PUT", "bkt", key, body=b"x"), b"NotImplemented"),
    ]:
        answer = handle(store, request)
        assert answer.status >= 400 and b"<Code>" + code + b"</Code>" in answer.body, request
    head = handle(store, S3Request("HEAD", "bkt", "out/missing"))
    assert head.status == 404 and head.body == b""
    body = b"<Delete><Object><Key>" + key.encode() + b"</Key></Object></Delete>"
    deleted = handle(store, S3Request("POST", "bkt", query={"delete": ""}, body=body))
    assert deleted.status == 200 and b"<Deleted><Key>" + key.encode() in deleted.body
    assert handle(store, S3Request("HEAD", "bkt", key)).status == 404
