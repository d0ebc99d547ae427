"""The cluster simulator: many jobs, GPU replicas, scheduling rounds, the policies Coach learns from.

workloads (files -> SimJob) -> apps (measured throughput and statistical efficiency) -> policies (who gets how
many GPUs at which batch size, every round) -> placement (scheduler_fork's profiles place the replicas) ->
engine (rounds in simulated time) -> results (the results format of `coach run`, plus plots).
"""
