"""Amazon S3 and S3-compatible stores, through boto3 (``pip install 'ptserve[s3]'``).

Credentials and region come from boto3's usual chain: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` with ``~/.aws/credentials``,
web identity tokens (EKS service accounts), then the instance's metadata service.
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) names another endpoint, as does the
``s3://host:port/bucket`` form of the URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore import exceptions as errors
from botocore.config import Config

from ptserve.common.errors import ServerError
from ptserve.repository.remote import RemoteLocation, StoredObject, store_error

_CREDENTIALS = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
    "credentials), or AWS_PROFILE with a credentials file"
)


class S3Store:
    """One bucket prefix; every call maps boto3's failures to a message that says what to fix."""

    def __init__(self, where: RemoteLocation) -> None:
        self.where = where
        config = Config(
            connect_timeout=10,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            user_agent_extra="ptserve",
        )
        session = boto3.session.Session()
        self.client: Any = session.client("s3", endpoint_url=where.endpoint or None, config=config)
        self.endpoint = str(self.client.meta.endpoint_url)

    def list(self) -> list[StoredObject]:
        found: list[StoredObject] = []
        prefix = self.where.prefix
        with _errors(self, "listing the objects"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.where.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    key = str(item["Key"])
                    etag = str(item.get("ETag", ""))
                    found.append(StoredObject(key[len(prefix) :], int(item["Size"]), etag))
        return found

    def download(self, key: str, target: Path) -> None:
        with _errors(self, f"downloading '{self.where.prefix}{key}'"):
            self.client.download_file(self.where.bucket, self.where.prefix + key, str(target))

    def read(self, key: str) -> bytes:
        with _errors(self, f"reading '{self.where.prefix}{key}'"):
            reply = self.client.get_object(Bucket=self.where.bucket, Key=self.where.prefix + key)
            return bytes(reply["Body"].read())


@contextlib.contextmanager
def _errors(store: S3Store, doing: str) -> Iterator[None]:
    """Turns boto3's exceptions into ServerErrors that name the bucket and what to check."""
    where = store.where
    at = f"bucket '{where.bucket}' at {store.endpoint}"
    try:
        yield
    except ServerError:
        raise
    except (errors.NoCredentialsError, errors.PartialCredentialsError) as exc:
        raise store_error(where, f"no usable AWS credentials ({exc}): {_CREDENTIALS}") from None
    except errors.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket" or (code == "404" and doing.startswith("listing")):
            raise store_error(where, f"the {at} does not exist") from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"):
            raise store_error(
                where, f"the {at} refused the credentials ({code}): {_CREDENTIALS}"
            ) from None
        if code in ("AccessDenied", "403") or status == 403:
            raise store_error(
                where,
                f"access denied to the {at} while {doing} (check the credentials' permissions: "
                "s3:ListBucket and s3:GetObject)",
            ) from None
        if code in ("NoSuchKey", "404"):
            raise store_error(where, f"{doing}: no such object in the {at}") from None
        message = error.get("Message", str(exc))
        raise store_error(where, f"{doing} in the {at} failed: {code} {message}") from None
    except (errors.EndpointConnectionError, errors.ConnectTimeoutError) as exc:
        raise store_error(where, f"cannot reach {store.endpoint} while {doing}: {exc}") from None
    except (errors.BotoCoreError, OSError) as exc:
        raise store_error(where, f"{doing} in the {at} failed: {exc}") from None
