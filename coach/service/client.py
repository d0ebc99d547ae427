"""The command line's side of the API (`coach status`, `submit`, `stop`, `logs`), with requests.

Every outcome is a value: the decoded answer, or a ClientError whose message is one line naming the endpoint.
Every request has limits (coach.net.http): CONNECT_TIMEOUT_S to connect, TIMEOUT_S per read, DEADLINE_S in all,
MAX_ANSWER_BYTES of answer; `logs --follow` streams without a deadline, but each event is at most MAX_EVENT_BYTES
and the server's heartbeat (every 15 s) must arrive within TIMEOUT_S.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import quote

import requests

from coach.net.http import AnswerTooLarge, Limits, bounded_request, problem

CONNECT_TIMEOUT_S = 5.0
TIMEOUT_S = 30.0  # per read
DEADLINE_S = 60.0  # for a whole request and its answer
MAX_ANSWER_BYTES = 16 << 20
MAX_EVENT_BYTES = 4 << 20  # one server-sent event of `logs --follow` (at most 1,000 lines of 2,000 characters)
LIMITS = Limits(CONNECT_TIMEOUT_S, TIMEOUT_S, DEADLINE_S, MAX_ANSWER_BYTES)


class ClientError(Exception):
    def __init__(self, message: str, bad_input: bool = False):
        super().__init__(message)
        self.bad_input = bad_input  # the server refused what was sent (422, 404, 409, 413): exit code 2


@dataclass(frozen=True)
class Client:
    server: str  # http://host:port
    token: str | None = None

    def _call(self, method: str, path: str, **kwargs) -> dict:
        url = self.server.rstrip("/") + path
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            answer = bounded_request(method, url, LIMITS, headers={**headers, **kwargs.pop("headers", {})}, **kwargs)
        except requests.RequestException as error:
            raise ClientError(f"{url}: {_failed(error)}") from None
        try:
            body = answer.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):  # not JSON, or not an object: whatever answered is not Coach
            raise ClientError(f"{url}: not a Coach server's answer (HTTP {answer.status_code})")
        if answer.status_code >= 400:
            detail = body.get("detail")
            if isinstance(detail, list):  # validation: one line per problem
                lines = [str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail]
                raise ClientError("\n".join(" ".join(line.split())[:400] for line in lines), bad_input=True)
            raise ClientError(f"{' '.join(str(detail).split())[:400]} (HTTP {answer.status_code})",
                              bad_input=answer.status_code in (400, 404, 409, 413, 422))
        return body

    def jobs(self) -> dict:
        return self._call("GET", "/api/jobs")

    def submit(self, text: str) -> dict:
        return self._call("POST", "/api/jobs", data=text.encode(), headers={"Content-Type": "application/yaml"})

    def logs(self, job: str, lines: int) -> dict:
        return self._call("GET", f"/api/jobs/{quote(job, safe='')}/logs", params={"lines": lines})

    def follow_logs(self, job: str, lines: int) -> Iterator[tuple[str, list[str]]]:
        """(function, lines) as the server sends them, until it closes the stream; ClientError when it cannot."""
        url = f"{self.server.rstrip('/')}/api/jobs/{quote(job, safe='')}/logs"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with requests.get(url, params={"lines": lines, "follow": "true"}, headers=headers, stream=True,
                              timeout=(CONNECT_TIMEOUT_S, TIMEOUT_S)) as answer:  # a heartbeat every 15 s
                if answer.status_code >= 400:
                    self._call("GET", f"/api/jobs/{quote(job, safe='')}/logs")  # raises the server's one line
                data, size = [], 0
                for line in _lines(answer, MAX_EVENT_BYTES):
                    if line.startswith("data: "):
                        data.append(line[6:])
                        size += len(line)
                        if size > MAX_EVENT_BYTES:
                            raise AnswerTooLarge(f"an event larger than {MAX_EVENT_BYTES} bytes (the limit)")
                    elif not line and data:
                        event = json.loads("\n".join(data))
                        data, size = [], 0
                        if not isinstance(event, dict) or "function" not in event or "lines" not in event:
                            raise ClientError(f"{url}: not a Coach server's answer (an event without its lines)")
                        yield event["function"], event["lines"]
        except requests.RequestException as error:
            raise ClientError(f"{url}: {_failed(error)}") from None
        except ValueError:  # an event that is not JSON, or not UTF-8
            raise ClientError(f"{url}: not a Coach server's answer (an event that is not JSON)") from None

    def stop(self, job: str) -> dict:
        return self._call("POST", f"/api/jobs/{quote(job, safe='')}/stop")


def _failed(error: requests.RequestException) -> str:
    """What went wrong with a request, for `URL: ...`: a limit it broke, or that the server cannot be reached."""
    if isinstance(error, (requests.Timeout, AnswerTooLarge)):
        return problem(error, LIMITS)
    return f"cannot reach the server ({problem(error, LIMITS)})"


def _lines(answer: requests.Response, max_bytes: int) -> Iterator[str]:
    """The stream's lines (text, without their ends), each at most `max_bytes` (AnswerTooLarge past it)."""
    pending = b""
    for chunk in answer.iter_content(64 << 10):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8")
        if len(pending) > max_bytes:
            raise AnswerTooLarge(f"a line larger than {max_bytes} bytes (the limit)")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8")
