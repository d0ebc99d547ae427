"""`coach scheduler`: scheduler_fork's plugins as a Kubernetes scheduler (watch, bind, Events, Lease, /metrics).

Modules, each with one job:
- objects.py: Kubernetes JSON -> NodeInfo, PodInfo, GroupInfo, quantities -> whole amounts (pure)
- constraints.py: taints, tolerations, nodeSelector, required node affinity -> scheduler_fork's values (pure)
- mirror.py: those, as the watch reports them, -> scheduler_fork calls; what to bind, why others wait (pure)
- watch.py: list+watch of one kind (resourceVersion, BOOKMARKs, relist on 410 Gone)
- binder.py: bindings through the pods' binding subresource, from a thread pool; bind_process.py: the same from a
  child process
- events.py: FailedScheduling / Scheduled Events and the PodScheduled condition
- leader.py: leader election with a coordination.k8s.io/v1 Lease
- metrics.py: /metrics (prometheus-client) and /healthz
- loop.py: KubeScheduler, which runs them all around one scheduling loop
- rest.py: raw responses read whole; POSTs of JSON bodies through the client's connection pool
- cli.py: `coach scheduler`, `coach bench kube-scheduler`; bench.py: the end-to-end benchmark
"""
