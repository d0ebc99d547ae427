"""ClusterSpec: nodes, their slots and prices, as plain frozen data. Placement over it lives in scheduler_fork."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

@dataclass(frozen=True)
class NodeSpec:
    name: str  # logical node name, unique in the cluster
    slots: int  # function instances the node can hold at once
    price_per_slot_s: float  # money per slot-second of a function placed here


@dataclass(frozen=True)
class ClusterSpec:
    name: str  # label used in logs
    nodes: tuple[NodeSpec, ...]  # in the order the file lists them
    source: str = "(default)"  # the file it came from
    scheduler: str | None = None  # scheduler_fork profile the file asks for (`coach run --scheduler` overrides)

    @property
    def total_slots(self) -> int:
        return sum(node.slots for node in self.nodes)

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node named {name!r} in cluster {self.name}")

    def price_of(self, node_name: str) -> float:
        return self.node(node_name).price_per_slot_s

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """The inverse of to_dict, for a run's manifest."""
        nodes = tuple(NodeSpec(n["name"], int(n["slots"]), float(n["price_per_slot_s"])) for n in data["nodes"])
        return cls(name=data["name"], nodes=nodes, source=data.get("source", "(manifest)"),
                   scheduler=data.get("scheduler"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "scheduler": self.scheduler,
            "nodes": [{"name": n.name, "slots": n.slots, "price_per_slot_s": n.price_per_slot_s} for n in self.nodes],
        }


#: The thesis's cluster: three nodes; every function instance takes one slot.
DEFAULT_CLUSTER = ClusterSpec(
    name="thesis-3-nodes",
    nodes=tuple(NodeSpec(f"node-{i}", slots=4, price_per_slot_s=0.0001) for i in (1, 2, 3)),
)
