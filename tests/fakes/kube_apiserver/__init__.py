"""A fake kube-apiserver that speaks the real protocol over loopback HTTP, for tests and demos.

It serves core/v1 namespaces, nodes, pods (with the `binding` and `status` subresources) and events,
events.k8s.io/v1 events (the same events), coordination.k8s.io/v1 leases and Coach's PodGroup custom resource;
lists and watches with label and field selectors, one global resourceVersion, 410 Expired for a watch from a
forgotten revision, BOOKMARKs, optimistic concurrency on updates, the three JSON patch formats, server-side
Tables and the discovery documents kubectl reads. Nothing is persisted; there is no authentication.

    with FakeApiServer() as api:
        api.write_kubeconfig(tmp / "kubeconfig")
"""

from tests.fakes.kube_apiserver.server import FakeApiServer

__all__ = ["FakeApiServer"]
