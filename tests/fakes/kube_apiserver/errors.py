"""API errors as the real kube-apiserver writes them: a `Status` object (kind Status, status Failure, reason,
code, message, details). Pure.

Handlers raise `ApiError`; the HTTP layer turns it into the response body, and a watch turns it into an ERROR
event. The messages follow the apiserver's wording, because clients and people grep for it.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """One failed request, carrying the `Status` object to answer with."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code  # HTTP status code
        self.reason = reason  # the machine-readable StatusReason, e.g. NotFound
        self.message = message  # the human-readable one-liner
        self.details = details  # name/group/kind (the resource plural)/causes, when known

    def status(self) -> dict[str, Any]:
        """The `Status` object (apiVersion v1) that the apiserver answers with."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def success(code: int) -> dict[str, Any]:
    """The `Status` a successful binding is answered with (201)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def qualified(plural: str, group: str) -> str:
    """`pods`, `leases.coordination.k8s.io`: how the apiserver names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found', _details(name, plural, group))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists',
                    _details(name, plural, group))


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
                    _details(name, plural, group))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, field: str, cause_reason: str, detail: str) -> ApiError:
    """422 for an object that fails validation; `cause_reason` is e.g. FieldValueRequired."""
    message = f"{detail}"
    details = {"name": name, "group": group, "kind": kind,
               "causes": [{"reason": cause_reason, "message": message, "field": field}]}
    return ApiError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {field}: {message}',
                    details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unknown_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def too_large(limit_bytes: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"the request entity is too large: limit is {limit_bytes}")


def unsupported_media(content_type: str, accepted: tuple[str, ...]) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format ({content_type or 'none'}) - accepted media "
                    f"types include: {', '.join(accepted)}")


def expired(requested_rv: int, oldest_rv: int) -> ApiError:
    """410 Gone: the watch asked for changes the history no longer holds; the client must list again."""
    return ApiError(410, "Expired", f"too old resource version: {requested_rv} ({oldest_rv})")
