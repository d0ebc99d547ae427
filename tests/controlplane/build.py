"""Build etcd, kube-apiserver, kube-scheduler and kubectl from this folder's go.mod, once per pinned version.

The binaries land in a cache folder outside the work tree, named after a digest of go.mod, go.sum, etcd/main.go
and the Go version, so a clean clone on the same machine reuses them and a change of pin builds anew. The build
itself goes through the Go module proxy (k8s.io/kubernetes and its staging modules as released modules).

    python -m tests.controlplane.build          # build if needed; print the folder of the binaries
    python -m tests.controlplane.build --info   # also print the cold build time and the folder's size

Side effects: runs `go build` (minutes of CPU on a cold cache), writes under the cache folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: What the build makes: the file name of each binary -> the Go package it comes from.
BINARIES = {
    "etcd": "./etcd",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",  # the client of the same release (no version skew in the tests)
}
CACHE_ENV = "COACH_CONTROLPLANE_CACHE"


class BuildError(RuntimeError):
    """The Go toolchain is missing or the build failed (the message says which, with go's last lines)."""


def cache_root() -> Path:
    """Where built control planes are kept: $COACH_CONTROLPLANE_CACHE, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coach" / "controlplane"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain (go) is not on PATH: the suite's control plane is built from source")
    return go


def _go_env() -> dict[str, str]:
    # The machine's own Go (no toolchain download); go.mod and go.sum as committed; no VCS stamping (a copy of the
    # tree without .git builds the same).
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}


def ldflags() -> str:
    """Strip symbols; stamp the release, so that /version (and kubectl's skew check) reads it."""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return "-s -w " + " ".join(f"-X k8s.io/component-base/version.{key}={value}" for key, value in stamp.items())


def version_key() -> str:
    """A digest of everything that decides what the build makes."""
    digest = hashlib.sha256(ldflags().encode())
    for name in ("go.mod", "go.sum", "etcd/main.go"):
        digest.update((HERE / name).read_bytes())
    digest.update(subprocess.run([_go(), "version"], capture_output=True, text=True, check=True).stdout.encode())
    return digest.hexdigest()[:16]


def kubernetes_version() -> str:
    """The k8s.io/kubernetes version go.mod pins ("v1.37.2")."""
    for line in (HERE / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == "k8s.io/kubernetes":
            return words[1]
    raise BuildError(f"{HERE / 'go.mod'}: k8s.io/kubernetes is not required")


def ensure_built(log=sys.stderr) -> Path:
    """The folder holding the three binaries, built first if this version has not been."""
    folder = cache_root() / version_key()
    if all((folder / "bin" / name).is_file() for name in BINARIES):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    print(f"building the control plane ({kubernetes_version()}) into {folder}: a few minutes on a cold cache",
          file=log, flush=True)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    try:
        result = subprocess.run([_go(), "build", "-trimpath", f"-ldflags={ldflags()}", "-o", f"{scratch / 'bin'}{os.sep}",
                                 *BINARIES.values()], cwd=HERE, env=_go_env(), capture_output=True, text=True)
        if result.returncode != 0:
            tail = " | ".join(result.stderr.strip().splitlines()[-5:])
            raise BuildError(f"go build of the control plane failed (exit {result.returncode}): {tail}")
        build_s = time.monotonic() - started
        (scratch / "build.json").write_text(json.dumps({"kubernetes": kubernetes_version(),
                                                        "build_s": round(build_s, 1)}) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"control plane built in {build_s:.0f} s", file=log, flush=True)
    return folder


def _size_bytes(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane.build", description=__doc__.splitlines()[0])
    parser.add_argument("--info", action="store_true", help="print the build time and the sizes too")
    args = parser.parse_args(argv)
    try:
        folder = ensure_built()
    except BuildError as error:
        print(f"controlplane build: {error}", file=sys.stderr)
        return 1
    print(folder)
    if args.info:
        info = json.loads((folder / "build.json").read_text())
        info["binaries_mb"] = round(_size_bytes(folder / "bin") / 2**20, 1)
        print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
