"""The command line's side of the API (`coach status`, `submit`, `stop`, `logs`), with requests.

Every outcome is a value: the decoded answer, or a ClientError whose message is one line naming the endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import quote

import requests

TIMEOUT_S = 30.0


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
            answer = requests.request(method, url, headers={**headers, **kwargs.pop("headers", {})},
                                      timeout=TIMEOUT_S, **kwargs)
        except requests.RequestException as error:
            raise ClientError(f"{url}: cannot reach the server ({type(error).__name__})") from None
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
                              timeout=(TIMEOUT_S, None)) as answer:
                if answer.status_code >= 400:
                    self._call("GET", f"/api/jobs/{quote(job, safe='')}/logs")  # raises the server's one line
                data = []
                for line in answer.iter_lines(decode_unicode=True):
                    if line.startswith("data: "):
                        data.append(line[6:])
                    elif not line and data:
                        event = json.loads("\n".join(data))
                        data = []
                        yield event["function"], event["lines"]
        except requests.RequestException as error:
            raise ClientError(f"{url}: cannot reach the server ({type(error).__name__})") from None

    def stop(self, job: str) -> dict:
        return self._call("POST", f"/api/jobs/{requests.utils.quote(job, safe='')}/stop")
