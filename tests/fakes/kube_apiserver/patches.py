"""The three PATCH formats the apiserver takes for JSON: merge (RFC 7386), strategic merge, JSON patch (RFC 6902).
Pure: every function returns a new document and leaves its inputs alone.

Strategic merge is approximated: it is a merge patch, except that a list of objects that all carry a `type`
(status.conditions, status.addresses) or all carry a `name` (containers, env, volumes) is merged item by item on
that key, and `$patch: delete` / `$patch: replace` directives are honoured. The real one reads the merge keys
from Go struct tags; these two keys cover the lists Coach's parts patch.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from tests.fakes.kube_apiserver.errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_key(old: list, new: list) -> str | None:
    items = old + new
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    for key in ("type", "name"):
        if all(key in item for item in items):
            return key
    return None


def _strategic_list(old: Any, new: list) -> list:
    key = _merge_key(old if isinstance(old, list) else [], new)
    if key is None or not isinstance(old, list):
        return [strategic_merge_patch(None, item) if isinstance(item, dict) else copy.deepcopy(item)
                for item in new if not (isinstance(item, dict) and item.get("$patch") == "delete")]
    merged = [copy.deepcopy(item) for item in old]
    for item in new:
        at = next((i for i, have in enumerate(merged) if have.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                merged.pop(at)
        elif at is None:
            merged.append(strategic_merge_patch(None, item))
        else:
            merged[at] = strategic_merge_patch(merged[at], item)
    return merged


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch that merges keyed lists of objects instead of replacing them (see the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder/..., $retainKeys, $patch: directives this fake does not need
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _strategic_list(result.get(key), value)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, patch: Any) -> Any:
    """RFC 6902 operations; a failed `test` or a bad pointer is a 422, as on the apiserver."""
    if not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        return jsonpatch.JsonPatch(patch).apply(target, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}")


PATCHERS = {MERGE: merge_patch, STRATEGIC: strategic_merge_patch, JSON_PATCH: json_patch}


def apply_patch(content_type: str, target: dict, patch: Any) -> Any:
    """Apply `patch` of the given media type; the caller has already checked that the type is accepted."""
    return PATCHERS[content_type](target, patch)
