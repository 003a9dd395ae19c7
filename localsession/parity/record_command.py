"""The ``localsession record`` subcommand: its options and its entry point."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_record(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    record = commands.add_parser(
        "record",
        help="a recording proxy: forward the SDK's requests upstream, write a cassette",
        description="A recording proxy in front of the real service (or any server): point "
        "the unmodified SDK at it as at `serve`; every request is signed again with your own "
        "AWS credentials, forwarded, and the exchange written, normalised and without "
        "credentials, to a cassette in --out that `serve --replay` and "
        "localsession.mock(replay=...) answer from (docs/parity.md).",
    )
    record.add_argument(
        "--upstream",
        required=True,
        metavar="URL|aws",
        help="where requests go: a server URL, or `aws` for the service's endpoints in --region",
    )
    record.add_argument("--out", required=True, type=Path, metavar="DIR", help="cassette folder")
    record.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    record.add_argument("--port", type=int, default=8081, help="port (default 8081; 0: free)")
    record.add_argument(
        "--region", default="us-west-2", help="region to sign for (default %(default)s)"
    )
    record.add_argument("--upstream-runtime", metavar="URL", help="the runtime's own upstream")
    record.add_argument("--upstream-s3", metavar="URL", help="S3's own upstream (no /s3 prefix)")
    record.add_argument(
        "--profile", help="the AWS profile to sign with (default: botocore's chain)"
    )
    record.add_argument(
        "--home",
        type=Path,
        help="where the SDK's tokenizers are exported (<home>/hf-hub, printed as "
        "HF_HUB_CACHE; default $LOCALSESSION_HOME, else ~/.localsession)",
    )
    record.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="also export TARGET's tokenizer under NAME, a service model id, as serve does "
        "(repeatable)",
    )
    record.add_argument(
        "--no-sign",
        action="store_true",
        help="forward unsigned (an upstream that checks no signature, e.g. a local serve)",
    )


def run_record(args: argparse.Namespace) -> int:
    from localsession.parity.running import RecordOptions, record

    fields = {k: v for k, v in vars(args).items() if k != "command"}
    return record(RecordOptions(**fields))
