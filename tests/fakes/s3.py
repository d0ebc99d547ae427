"""An S3 server on loopback (moto's server mode) for tests and demos: the real S3 protocol, nothing on disk.

`with LoopbackS3() as s3:` serves on a free port of 127.0.0.1 in a thread of this process; `s3.environment()` is
the AWS_* variables that point boto3 (in this process and in the function hosts it starts) at it, with fake
credentials; `s3.make_bucket(name)` creates a bucket. `python -m tests.fakes.s3 --port N` serves until Ctrl-C or SIGTERM.

Moto keeps one in-memory state per process: two servers in one process share their buckets, so tests use
bucket names of their own. Side effects: a listening socket and a server thread, both gone after `stop()`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading

#: Fake credentials and region: moto accepts any; real ones must never be needed by a test.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "coach-test", "AWS_SECRET_ACCESS_KEY": "coach-test-secret",
                    "AWS_DEFAULT_REGION": "us-east-1"}


class LoopbackS3:
    """moto's S3 over HTTP on 127.0.0.1; `start()` returns once it accepts connections, `stop()` frees the port."""

    def __init__(self, port: int = 0, quiet: bool = True):
        self.port = port  # 0: any free port (the chosen one is here after start)
        self.quiet = quiet  # no line per request on stderr (werkzeug's logger, for the whole process)
        self._server = None
        self._thread: threading.Thread | None = None
        self._client = None  # for make_bucket, made once

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackS3:
        """Listen (an OSError here when the port is taken), then serve in a thread; what moto's
        ThreadedMotoServer does, except that a failed bind raises instead of leaving its caller waiting."""
        from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                                   create_backend_app)
        from werkzeug.serving import make_server

        if self.quiet:
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
        if self.port:  # werkzeug prints a paragraph and exits when the port is taken: ask first
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(("127.0.0.1", self.port))
        self._server = make_server("127.0.0.1", self.port, DomainDispatcherApplication(create_backend_app),
                                   threaded=True, request_handler=MotoRequestHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"loopback-s3-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wait for the thread, close the listening socket."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is None:
            return
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()
        self._server = self._thread = None

    def __enter__(self) -> LoopbackS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def environment(self) -> dict[str, str]:
        """The variables that point boto3 here, as a controller and its functions read them."""
        return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL_S3": self.endpoint_url}

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (it may exist already); returns `s3://name`."""
        if self._client is None:
            import boto3

            self._client = boto3.session.Session(
                aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                region_name=FAKE_CREDENTIALS["AWS_DEFAULT_REGION"]).client("s3", endpoint_url=self.endpoint_url)
        try:
            self._client.create_bucket(Bucket=name)
        except self._client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return f"s3://{name}"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """Serve until interrupted, printing the environment that points boto3 here."""
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.s3", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000, help="port on 127.0.0.1 (default: %(default)s)")
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    args = parser.parse_args(argv)
    server = LoopbackS3(args.port)
    signal.signal(signal.SIGTERM, _interrupt)  # stop as after Ctrl-C
    try:
        server.start()
    except OSError as error:
        print(f"--port: {args.port}: {error.strerror or error}", file=sys.stderr)
        return 2
    try:
        for bucket in args.bucket:
            server.make_bucket(bucket)
        for name, value in server.environment().items():
            print(f"export {name}={value}", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second one must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
