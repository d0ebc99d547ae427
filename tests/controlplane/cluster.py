"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and (on demand) kube-scheduler.

kube-apiserver runs as a cluster's would: TLS with its own CA, token authentication, RBAC (and the Node
authorizer), the default admission plugins, service-account tokens, an audit log of every request. No
kube-controller-manager and no kubelet run, so this module does the little of their work the tests need, through
the API like they would: it creates each namespace's `default` ServiceAccount, and `add_node` makes a node Ready
(its status, and the taints the node lifecycle controller would leave).

    plane = ControlPlane(workdir).start()      # about 10 s
    api = plane.client()                       # kubernetes.client.ApiClient as the admin
    plane.add_node("n1", cpu="4", memory="8Gi")
    plane.start_kube_scheduler()               # the real default scheduler, on the same apiserver
    plane.stop()

Side effects: three child processes (each ends with this process: PR_SET_PDEATHSIG), files under `workdir`.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import ipaddress
import json
import secrets
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from kubernetes import client

from tests.controlplane.build import ensure_built

HOST = "127.0.0.1"
#: The users of the token file: name -> groups. The admin is a cluster admin through system:masters; the
#: scheduler is the user kube-scheduler's bootstrap ClusterRoleBinding names.
USERS = {"admin": ("system:masters",), "system:kube-scheduler": ()}
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 10.0
#: An etcd that never syncs to disk: the control plane lives for one test session.
ETCD_FLAGS = ("--unsafe-no-fsync", "--log-level=error", "--quota-backend-bytes=4294967296")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the test process ends, so no control plane outlives its session."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def write_certificates(folder: Path) -> None:
    """A CA, the apiserver's serving certificate (127.0.0.1, localhost) and the service-account key pair."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coach-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc"),
             x509.IPAddress(ipaddress.ip_address(HOST))]
    serving = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                                                    "kube-apiserver")]))
               .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.SubjectAlternativeName(names), critical=False)
               .sign(ca_key, hashes.SHA256()))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.crt").write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.key").write_bytes(_pem_key(key))
    (folder / "sa.key").write_bytes(_pem_key(sa_key))
    (folder / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


#: The one thread that forks the control plane's processes; it lives as long as the test process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="controlplane-spawner")

AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler) on loopback; see the module docstring."""

    workdir: Path
    url: str = ""  # https://127.0.0.1:PORT
    tokens: dict[str, str] = field(default_factory=dict)  # user -> bearer token
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # name -> running child
    bin: Path = Path()  # the folder of the built binaries
    start_s: float = 0.0  # seconds from starting etcd to a ready apiserver
    _etcd_url: str = ""
    _apiserver_port: int = 0

    # ---- life ----------------------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.bin = ensure_built() / "bin"
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = self.workdir / "pki"
        write_certificates(pki)
        self.tokens = {user: secrets.token_hex(16) for user in USERS}
        (pki / "tokens.csv").write_text("".join(
            f'{self.tokens[user]},{user},{user},"{",".join(groups)}"\n' for user, groups in USERS.items()))
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        started = time.monotonic()
        self._start_etcd()
        self._apiserver_port = free_port()
        self.url = f"https://{HOST}:{self._apiserver_port}"
        self._start_apiserver()
        self.wait_ready()
        self.start_s = time.monotonic() - started
        self.write_kubeconfig(self.workdir / "admin.kubeconfig", "admin")
        self.ensure_namespace("default")
        return self

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        """Start a binary from the spawner thread: a child's death signal follows the thread that forked it,
        so a child forked from a short-lived thread (a test's watch callback) would die with that thread."""
        def spawn() -> subprocess.Popen:
            with open(self.workdir / f"{name}.log", "ab") as log:
                return subprocess.Popen([str(self.bin / name), *args], stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)

        process = _SPAWNER.submit(spawn).result()
        self.processes[name] = process
        return process

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self._etcd_url = f"http://{HOST}:{client_port}"
        peer = f"http://{HOST}:{peer_port}"
        self._spawn("etcd", ["--name", "coach-test", "--data-dir", str(self.workdir / "etcd"),
                             "--listen-client-urls", self._etcd_url, "--advertise-client-urls", self._etcd_url,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", f"coach-test={peer}", *ETCD_FLAGS])

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        self._spawn("kube-apiserver", [
            f"--etcd-servers={self._etcd_url}", f"--bind-address={HOST}", f"--advertise-address={HOST}",
            f"--secure-port={self._apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            f"--audit-log-path={self.workdir / 'audit.log'}", f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            "--audit-log-mode=blocking", "--audit-log-maxsize=0",
            # the scheduler benchmarks create thousands of objects a second: no inflight limit below the bench's
            "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
            "--profiling=false", "--v=0"])

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until /readyz answers ok (every post-start hook done: RBAC bootstrap, priority classes)."""
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.tokens['admin']}"}
        last = "no answer"
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if name in ("etcd", "kube-apiserver") and process.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited with {process.returncode}: {tail}")
            try:
                answer = requests.get(f"{self.url}/readyz", headers=headers, verify=self.ca_file, timeout=2)
                if answer.status_code == 200:
                    return
                last = f"{answer.status_code} {answer.text[-300:]}"
            except requests.RequestException as error:
                last = str(error)
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not ready within {timeout_s:g} s: {last}")

    def stop(self) -> None:
        """Stop every process (the scheduler first, etcd last); safe to call twice."""
        for name in sorted(self.processes, key=lambda n: (n == "etcd", n == "kube-apiserver")):
            self._end(self.processes.pop(name))

    @staticmethod
    def _end(process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart_apiserver(self) -> None:
        """Kill kube-apiserver and start it again on the same port and etcd (every watch and connection ends; its
        new watch cache starts at etcd's current revision). Killed, not stopped: a graceful stop waits for open
        watches to drain, which takes longer than the tests' patience."""
        process = self.processes.pop("kube-apiserver")
        process.kill()
        process.wait()
        self._start_apiserver()
        self.wait_ready()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- clients -------------------------------------------------------------------------------------------

    @property
    def ca_file(self) -> str:
        return str(self.workdir / "pki" / "ca.crt")

    def kubeconfig(self, token: str, namespace: str = "default", user: str = "user") -> dict:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "coach-test",
                "clusters": [{"name": "coach-test", "cluster": {"server": self.url,
                                                                "certificate-authority": self.ca_file}}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "coach-test", "context": {"cluster": "coach-test", "user": user,
                                                                "namespace": namespace}}]}

    def write_kubeconfig(self, path: Path, user: str = "admin", namespace: str = "default",
                         token: str | None = None) -> Path:
        """A kubeconfig for one of USERS (or any bearer `token`), with `namespace` as its context's."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(token or self.tokens[user], namespace, user)))
        path.chmod(0o600)
        return path

    def client(self, user: str = "admin", token: str | None = None) -> client.ApiClient:
        """An ApiClient of the official client for one of USERS (or a bearer `token`)."""
        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = self.ca_file
        configuration.api_key = {"authorization": f"Bearer {token or self.tokens[user]}"}
        return client.ApiClient(configuration)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token of a ServiceAccount (TokenRequest), as a pod running under it would hold."""
        with self.client() as api:
            request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=seconds))
            return client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status.token

    # ---- what kube-controller-manager and the kubelet would do -----------------------------------------------

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """The namespace and its `default` ServiceAccount (which the ServiceAccount admission plugin needs)."""
        with self.client() as api:
            core = client.CoreV1Api(api)
            _create(lambda: core.create_namespace({"metadata": {"name": name, "labels": dict(labels or {})}}))
            _create(lambda: core.create_namespaced_service_account(name, {"metadata": {"name": "default"}}))

    def apply_crd(self, path: Path, timeout_s: float = 30.0) -> str:
        """Create a CustomResourceDefinition from a YAML file (or keep the one there) and wait until Established."""
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        with self.client() as api:
            extensions = client.ApiextensionsV1Api(api)
            _create(lambda: extensions.create_custom_resource_definition(body))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                conditions = extensions.read_custom_resource_definition(name).status.conditions or []
                if any(c.type == "Established" and c.status == "True" for c in conditions):
                    return name
                time.sleep(0.1)
        raise RuntimeError(f"CRD {name} not Established within {timeout_s:g} s")

    def add_node(self, name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110",
                 labels: Mapping[str, str] | None = None, taints: Iterable[Mapping[str, Any]] = (),
                 unschedulable: bool = False, ready: bool = True) -> None:
        """A node as a kubelet registers it and the node lifecycle controller then sees it.

        On create, the TaintNodesByCondition admission plugin gives it `node.kubernetes.io/not-ready:NoSchedule`;
        a Ready node has that taint taken off again (as the node lifecycle controller does once the kubelet
        reports Ready), and then carries exactly `taints`. A node that is not Ready keeps the not-ready taint.
        """
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        status = "True" if ready else "False"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self.client() as api:
            core = client.CoreV1Api(api)
            core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                    **dict(labels or {})}},
                              "spec": {"unschedulable": unschedulable}})
            core.patch_node_status(name, {"status": {
                "capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": status, "reason": "KubeletReady" if ready else
                                "KubeletNotReady", "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "addresses": [{"type": "InternalIP", "address": HOST}]}})
            wanted = [dict(taint) for taint in taints]
            if not ready:
                wanted.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
            core.patch_node(name, {"spec": {"taints": wanted or None}})

    def delete_nodes(self, names: Iterable[str]) -> None:
        with self.client() as api:
            core = client.CoreV1Api(api)
            for name in names:
                _ignore_missing(functools.partial(core.delete_node, name))

    def force_delete_pods(self, namespace: str) -> None:
        """Delete every pod of `namespace` at once (grace 0), as a kubelet confirms a pod's end."""
        with self.client() as api:
            core = client.CoreV1Api(api)
            for pod in core.list_namespaced_pod(namespace).items:
                _ignore_missing(functools.partial(core.delete_namespaced_pod, pod.metadata.name, namespace,
                                                  grace_period_seconds=0))

    # ---- the real default scheduler -------------------------------------------------------------------------

    def start_kube_scheduler(self, qps: float = 5000.0, burst: int = 5000) -> None:
        """kube-scheduler with its default profile, its client's QPS and burst raised as scheduler_perf does."""
        if "kube-scheduler" in self.processes and self.processes["kube-scheduler"].poll() is None:
            return
        kubeconfig = self.write_kubeconfig(self.workdir / "kube-scheduler.kubeconfig", "system:kube-scheduler",
                                           namespace="kube-system")
        config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                  "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
                  "leaderElection": {"leaderElect": False}}
        path = self.workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kube-scheduler", [f"--config={path}", "--secure-port=0", "--v=1"])

    def stop_kube_scheduler(self) -> None:
        process = self.processes.pop("kube-scheduler", None)
        if process is not None:
            self._end(process)

    # ---- the audit log --------------------------------------------------------------------------------------

    def audit(self, since_line: int = 0) -> list[dict]:
        """Every audit event (ResponseComplete stage) from line `since_line` on."""
        lines = (self.workdir / "audit.log").read_text().splitlines()[since_line:]
        return [event for event in map(json.loads, lines) if event.get("stage") == "ResponseComplete"]

    def audit_lines(self) -> int:
        """How many lines the audit log has now (pass it to `audit` to read only what follows)."""
        path = self.workdir / "audit.log"
        return len(path.read_text().splitlines()) if path.exists() else 0


def _create(call) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 409:
            raise


def _ignore_missing(call) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise

