"""The cluster simulator (`coach simulate`): many jobs, GPU replicas, scheduling rounds, the policies Coach learns
from.

workloads (files -> SimJob) -> apps (measured throughput and statistical efficiency) -> policies (who gets how
many GPUs at which batch size, every round) -> placement (scheduler_fork's profiles place the replicas) ->
engine (rounds in simulated time) -> results (the results format of `coach run`, plus plots).

Its policies are the cluster level (coach.simulator.view: ClusterPolicy, ClusterJobView; the registry
coach.simulator.policies.CLUSTER_POLICIES). Not to be confused with Coach's own virtual-time runs of its lifecycle
(coach.app.virtual_run, coach.drivers.virtual, coach.platforms.virtual), whose policies are the run level
(coach.policy.run_policy): the two share scheduler_fork's adapter (coach.placement.in_process), the learned dl2's
network (coach.dl2) and the results format, not their clocks, platforms or policies.
"""
