"""A real S3 API on loopback: moto's server mode (``moto.server``, from the ``test`` extra:
moto[server], boto3) on 127.0.0.1 and a free port. The test suite starts one per session (the
``s3`` fixture in tests/conftest.py) and each test takes a fresh bucket; the scale benchmark
(``bench --scale --uri loopback``) measures an index on it beside one on local disk.

One change to moto: requests that write are answered one at a time. S3 applies a conditional
write (``If-Match``, ``If-None-Match``: how two indexers decide which commits) atomically; moto
checks the condition and then writes, in a thread per request, so two writes at once could both
pass the check and both succeed, which no real store allows."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

KEY, SECRET, REGION = "testing", "testing", "us-east-1"

SERVER = r'''
import sys, threading
import moto.server

class WritesOneAtATime(moto.server.DomainDispatcherApplication):
    writing = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") in ("GET", "HEAD", "OPTIONS"):
            return super().__call__(environ, start_response)
        with self.writing:
            return list(super().__call__(environ, start_response))

moto.server.DomainDispatcherApplication = WritesOneAtATime
moto.server.main(sys.argv[1:])
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackS3:
    """One moto server process; ``bucket()`` makes a new bucket, ``config()`` a config file
    pointing ``index.uri`` at it with explicit storage keys, ``env()`` the same as AWS_* variables."""

    def __init__(self, log: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._names = itertools.count()
        self._log = open(log, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, "-H", "127.0.0.1", "-p",
                                      str(self.port)], stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    said = Path(log).read_text(errors="replace").strip().splitlines()
                    raise RuntimeError(f"moto's S3 server did not start{': ' + said[-1] if said else ''} "
                                       f"(log: {log})")
                time.sleep(0.1)

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY,
                            aws_secret_access_key=SECRET, region_name=REGION)

    def bucket(self) -> str:
        name = f"mem-test-{next(self._names)}"
        self.client().create_bucket(Bucket=name)
        return name

    def config(self, path: Path, uri: str, **extra: str) -> Path:
        """A --config file putting the index at ``uri`` with this server's keys."""
        storage = {"endpoint": self.endpoint, "region": REGION, "access_key_id": KEY,
                   "secret_access_key": SECRET, "allow_http": "true"} | extra
        path.write_text(f'[index]\nuri = "{uri}"\n\n[index.storage]\n'
                        + "".join(f'{k} = "{v}"\n' for k, v in storage.items()))
        return path

    def env(self) -> dict[str, str]:
        """The standard AWS variables for this server (no config keys needed)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def keys(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix`` with its bytes."""
        client, out = self.client(), {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for entry in page.get("Contents", []):
                out[entry["Key"]] = client.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
        return out

    def copy(self, bucket: str, source: str, target: str) -> None:
        """Copy every object under ``source/`` to ``target/`` (an index's state, for a trial)."""
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=source + "/"):
            for entry in page.get("Contents", []):
                key = target + entry["Key"][len(source):]
                client.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": entry["Key"]})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
