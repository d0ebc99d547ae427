"""The nodes as placement sees them: each node's slots, class and used resources, and the nodes in buckets.

A node's *class* is what, with the pod, decides whether the pod may go there: its allocatable resources, its
NoSchedule/NoExecute taints, whether it is cordoned, and those of its labels that some known pod's node selection
reads (and its name, while a known pod selects nodes by name). Nodes that differ only in labels no pod reads share
a class, so the `kubernetes.io/hostname` label every real node carries does not set them apart.

A node's *shape* is its class plus what its pods take: its slot cap and free slots, and, for a class with
allocatable resources, the resources its pods request and how many pods it holds. Every Filter and Score plugin
answers from the shape alone, so nodes of one shape are judged once, as a *bucket*: 5,000 identical nodes are a
handful of buckets, whatever their names and hostname labels.

Only `SchedulingState` (which extends `NodeTable`) changes a table. Side effects: none.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Iterable, Iterator, NamedTuple, Sequence

from scheduler_fork.constraints import FILTERING_EFFECTS, PODS, Amounts, Taint, selector_keys
from scheduler_fork.framework import Node, Pod

#: The capacity, in its Shape, of a node without a slot cap: more slots than any pods can take.
NO_SLOT_CAP = 1 << 62


class Shape(NamedTuple):
    """What decides whether a pod fits a node and how it scores there; nodes of one shape form a bucket.

    Ordered as (capacity, free, ...) so that buckets are visited in the same order as when a node was only a
    number of slots."""

    capacity: int  # slots the node holds at most (NO_SLOT_CAP: no cap)
    free: int  # capacity minus the slots its pods take (below zero when pods were found beyond the cap)
    cls: int  # its NodeClass's number in `NodeTable.classes`
    used: Amounts  # what its pods request, with "pods" = how many it holds; () for a class without allocatable


class NodeClass:
    """The part of a node that pods' requirements are matched against (see the module docstring)."""

    __slots__ = ("id", "allocatable", "taints", "unschedulable", "labels", "name")

    def __init__(self, number: int, allocatable: Amounts | None, taints: tuple[Taint, ...], unschedulable: bool,
                 labels: tuple[tuple[str, str], ...], name: str | None) -> None:
        self.id = number  # its place in NodeTable.classes
        self.allocatable = None if allocatable is None else dict(allocatable)  # resource -> amount; None: unlimited
        self.taints = taints  # its NoSchedule and NoExecute taints, in the node's order
        self.unschedulable = unschedulable  # cordoned
        self.labels = dict(labels)  # the labels some known pod reads (not every label of the node)
        self.name = name  # the node's name while some known pod selects by name, else None

    def __repr__(self) -> str:
        return (f"NodeClass({self.id}, allocatable={self.allocatable}, taints={len(self.taints)}, "
                f"unschedulable={self.unschedulable}, labels={self.labels}, name={self.name!r})")


class IndexedSet:
    """A set of ints with O(1) add, discard and access by position (for a uniform seeded pick)."""

    __slots__ = ("items", "pos")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self.items: list[int] = []
        self.pos: dict[int, int] = {}
        for item in items:
            self.add(item)

    def add(self, item: int) -> None:
        if item not in self.pos:
            self.pos[item] = len(self.items)
            self.items.append(item)

    def discard(self, item: int) -> None:
        at = self.pos.pop(item, None)
        if at is None:
            return
        last = self.items.pop()
        if last != item:
            self.items[at] = last
            self.pos[last] = at

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: object) -> bool:
        return item in self.pos

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)


class NodeTable:
    """Every node known, in placement (in a bucket) or out of it (`off`); see the module docstring."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes: list[Node] = []  # in the order given, then in the order added
        self.off: set[int] = set()  # nodes out of placement (removed); their pods keep what they take until deleted
        self.node_index: dict[str, int] = {}  # name -> number
        self.capacity: list[int | None] = []  # node -> its slot cap (None: no cap)
        self.slots_used: list[int] = []  # node -> slots its pods take
        self.used: list[dict[str, int]] = []  # node -> resource -> what its pods request ("pods": how many), no zeros
        self.node_class: list[NodeClass] = []  # node -> its class
        self.shape: list[Shape] = []  # node -> its shape, kept current (also out of placement)
        self.jobs_on: list[dict[str, int]] = []  # node -> job -> its slot-taking pods there (Coach's pods)
        self.others_used: dict[int, dict[str, int]] = {}  # node -> what its slot-less pods (other schedulers') take
        self.classes: list[NodeClass] = []  # every class, by number
        self._classes_by_key: dict[tuple, NodeClass] = {}
        self.buckets: dict[Shape, IndexedSet] = {}  # shape -> the nodes in placement of that shape (never empty)
        self.bucket_keys: list[Shape] = []  # the buckets' shapes, sorted
        self.total_slots = 0  # slots of the capped nodes in placement
        self.total_free = 0  # their free slots
        self.uncapped = 0  # nodes in placement without a slot cap
        self.with_resources = 0  # nodes in placement with allocatable resources
        self.tainted = 0  # nodes in placement with a NoSchedule or NoExecute taint
        self.cordoned = 0  # nodes in placement that are unschedulable
        self.fit_version = 0  # bumped whenever the nodes in placement or their classes change
        self.others_version = 0  # bumped whenever other schedulers' pods take or give back room
        self._left: dict[Shape, int] | None = None  # the shapes of the nodes with only others' pods on them
        self._label_refs: dict[str, int] = {}  # label key -> known pods whose node selection reads it
        self._name_refs = 0  # known pods that select nodes by name
        self._empty: dict[Shape, int] | None = None  # the shapes of the nodes in placement, had they no pods
        for node in nodes:
            if not isinstance(node, Node):
                raise TypeError(f"nodes must be scheduler_fork.Node, got {type(node).__name__}")
            if node.name in self.node_index:
                raise ValueError(f"duplicate node name {node.name!r}")
            i = self._append(node)
            self.off.discard(i)
            self._enter(i)

    # ---- queries ---------------------------------------------------------------------------------------------

    def node_name(self, node: int) -> str:
        return self.nodes[node].name

    @property
    def active_nodes(self) -> int:
        """How many nodes are in placement."""
        return len(self.nodes) - len(self.off)

    @property
    def free(self) -> list[int | None]:
        """Node -> free slots (None for a node without a slot cap); a snapshot."""
        return [None if cap is None else cap - used for cap, used in zip(self.capacity, self.slots_used)]

    @property
    def slots_only(self) -> bool:
        """Every node in placement has a slot cap: slots, counted, say whether pods fit (also in words)."""
        return self.uncapped == 0

    def current_shapes(self) -> dict[Shape, int]:
        """Shape -> how many nodes in placement have it now."""
        return {shape: len(bucket.items) for shape, bucket in self.buckets.items()}

    def empty_shapes(self) -> dict[Shape, int]:
        """Shape -> how many nodes in placement would have it were every pod gone (a cached, shared dict)."""
        if self._empty is None:
            counts: dict[Shape, int] = {}
            for i, node in enumerate(self.nodes):
                if i not in self.off:
                    cap = NO_SLOT_CAP if node.slots is None else node.slots
                    shape = Shape(cap, cap, self.node_class[i].id, ())
                    counts[shape] = counts.get(shape, 0) + 1
            self._empty = counts
        return self._empty

    def left_by_others(self) -> dict[Shape, int]:
        """Shape -> how many nodes in placement would have it were only other schedulers' pods on them (a cached,
        shared dict): what a gang can count on getting at once, since Coach's own pods leave when their jobs end
        and other schedulers' pods may never."""
        if not self.others_used:
            return self.empty_shapes()
        if self._left is None:
            counts = dict(self.empty_shapes())
            for i, theirs in self.others_used.items():
                if i in self.off:
                    continue
                cap = NO_SLOT_CAP if self.nodes[i].slots is None else self.nodes[i].slots
                cls = self.node_class[i].id
                empty, held = Shape(cap, cap, cls, ()), Shape(cap, cap, cls, tuple(sorted(
                    (name, amount) for name, amount in theirs.items() if amount)))
                counts[empty] -= 1
                if not counts[empty]:
                    del counts[empty]
                counts[held] = counts.get(held, 0) + 1
            self._left = counts
        return self._left

    def shapes_without_others(self) -> dict[Shape, int]:
        """Shape -> how many nodes in placement would have it were every slot-less pod (another scheduler's) gone."""
        counts = self.current_shapes()
        for i, theirs in self.others_used.items():
            if i in self.off or self.node_class[i].allocatable is None:
                continue
            shape, rest = self.shape[i], dict(self.used[i])
            for name, amount in theirs.items():
                rest[name] -= amount
            without = Shape(shape.capacity, shape.free, shape.cls, tuple(sorted((k, v) for k, v in rest.items() if v)))
            counts[shape] -= 1
            if not counts[shape]:
                del counts[shape]
            counts[without] = counts.get(without, 0) + 1
        return counts

    def shape_after(self, shape: Shape, pod: Pod) -> Shape:
        """The shape of a node of `shape` once `pod` is placed there."""
        used = shape.used
        if self.classes[shape.cls].allocatable is not None:
            amounts = dict(used)
            amounts[PODS] = amounts.get(PODS, 0) + 1
            for name, amount in pod.requests:
                amounts[name] = amounts.get(name, 0) + amount
            used = tuple(sorted(amounts.items()))
        return Shape(shape.capacity, shape.free - pod.slots, shape.cls, used)

    # ---- changes ---------------------------------------------------------------------------------------------

    def set_node(self, node: Node) -> None:
        """Add a node, or give a known one what `node` says, and bring it (back) into placement.

        Its pods keep what they take: free slots = cap - slots they take, which may be below zero when the cap
        shrinks under them (then nothing more fits there); likewise for resources.
        """
        if not isinstance(node, Node):
            raise TypeError(f"nodes must be scheduler_fork.Node, got {type(node).__name__}")
        i = self.node_index.get(node.name)
        if i is None:
            i = self._append(node)
        self._leave(i)
        self.nodes[i] = node
        self.capacity[i] = node.slots
        self.node_class[i] = self._class(node)
        self.shape[i] = self._shape(i)
        self.off.discard(i)
        self._enter(i)
        self._nodes_changed()

    def remove_node(self, name: str) -> None:
        """Take a node out of placement (gone); unknown names are ignored."""
        i = self.node_index.get(name)
        if i is None or i in self.off:
            return
        self._leave(i)
        self.off.add(i)
        self._nodes_changed()

    def room_for(self, node: int, pod: Pod) -> str | None:
        """None when `pod` fits what node `node` has left (slots and resources), else why not."""
        free = self.shape[node].free
        if pod.slots > free:
            return f"node {self.nodes[node].name} has {free} free slots, pod {pod.name} takes {pod.slots}"
        allocatable = self.node_class[node].allocatable
        if allocatable is not None:
            used = self.used[node]
            for resource, amount in ((PODS, 1),) + pod.requests:
                left = allocatable.get(resource, 0) - used.get(resource, 0)
                if amount > left:
                    return f"node {self.nodes[node].name} has {left} {resource} left, pod {pod.name} takes {amount}"
        return None

    def take(self, node: int, pod: Pod) -> None:
        """`pod` now holds what it takes on `node` (reserved or bound)."""
        self.slots_used[node] += pod.slots
        used = self.used[node]
        used[PODS] = used.get(PODS, 0) + 1
        if pod.requests:
            for name, amount in pod.requests:
                used[name] = used.get(name, 0) + amount
        if not pod.slots:
            _add(self.others_used.setdefault(node, {}), pod, 1)
            self._others_changed()
        self._reshape(node)

    def give(self, node: int, pod: Pod) -> None:
        """`pod` no longer holds anything on `node`."""
        self.slots_used[node] -= pod.slots
        used = self.used[node]
        _add(used, pod, -1)
        if not pod.slots:
            theirs = self.others_used[node]
            _add(theirs, pod, -1)
            if not theirs:
                del self.others_used[node]
            self._others_changed()
        self._reshape(node)

    def watch_selectors(self, pod: Pod, delta: int) -> None:
        """A pod became known (`delta` 1) or was forgotten (-1): the labels its node selection reads join or leave
        the node classes (every node is classed again when that set changes)."""
        if not pod.node_selector and pod.node_affinity is None:
            return
        keys, by_name = selector_keys(pod.node_selector, pod.node_affinity)
        changed = False
        for key in keys:
            count = self._label_refs.get(key, 0) + delta
            changed = changed or count == 0 or count == delta
            if count:
                self._label_refs[key] = count
            else:
                del self._label_refs[key]
        if by_name:
            self._name_refs += delta
            changed = changed or self._name_refs in (0, delta)
        if changed:
            for i, node in enumerate(self.nodes):
                cls = self._class(node)
                if cls is not self.node_class[i]:
                    self._leave(i)
                    self.node_class[i] = cls
                    self.shape[i] = self._shape(i)
                    if i not in self.off:
                        self._enter(i)
            self._empty = None
            self._left = None

    # ---- internals -------------------------------------------------------------------------------------------

    def _append(self, node: Node) -> int:
        """A new node, out of placement for now."""
        i = len(self.nodes)
        self.nodes.append(node)
        self.node_index[node.name] = i
        self.capacity.append(node.slots)
        self.slots_used.append(0)
        self.used.append({})
        self.node_class.append(self._class(node))
        self.jobs_on.append({})
        self.shape.append(self._shape(i))
        self.off.add(i)
        return i

    def _class(self, node: Node) -> NodeClass:
        refs = self._label_refs
        labels = tuple(pair for pair in node.labels if pair[0] in refs) if refs else ()
        taints = tuple(t for t in node.taints if t.effect in FILTERING_EFFECTS)
        key = (node.allocatable, taints, node.unschedulable, labels, node.name if self._name_refs else None)
        cls = self._classes_by_key.get(key)
        if cls is None:
            cls = self._classes_by_key[key] = NodeClass(len(self.classes), *key)
            self.classes.append(cls)
        return cls

    def _shape(self, i: int) -> Shape:
        cap = self.capacity[i]
        capacity = NO_SLOT_CAP if cap is None else cap
        cls = self.node_class[i]
        used = () if cls.allocatable is None else tuple(sorted(self.used[i].items()))
        return Shape(capacity, capacity - self.slots_used[i], cls.id, used)

    def _reshape(self, i: int) -> None:
        """Node `i`'s pods changed (not its class or cap): move it to the bucket of its new shape, if that changed.
        (On the path of every reservation: written out rather than through _shape and the bucket helpers.)"""
        old = self.shape[i]
        cls = self.node_class[i]
        used = () if cls.allocatable is None else tuple(sorted(self.used[i].items()))
        shape = Shape(old.capacity, old.capacity - self.slots_used[i], old.cls, used)
        if shape == old:
            return
        self.shape[i] = shape
        if i in self.off:
            return
        buckets = self.buckets
        bucket = buckets[old]
        bucket.discard(i)
        if not bucket.items:
            del buckets[old]
            del self.bucket_keys[bisect_left(self.bucket_keys, old)]
        bucket = buckets.get(shape)
        if bucket is None:
            bucket = buckets[shape] = IndexedSet()
            insort(self.bucket_keys, shape)
        bucket.add(i)
        if self.capacity[i] is not None:
            self.total_free += shape.free - old.free

    def _into_bucket(self, i: int, shape: Shape) -> None:
        bucket = self.buckets.get(shape)
        if bucket is None:
            bucket = self.buckets[shape] = IndexedSet()
            insort(self.bucket_keys, shape)
        bucket.add(i)

    def _out_of_bucket(self, i: int, shape: Shape) -> None:
        bucket = self.buckets[shape]
        bucket.discard(i)
        if not bucket.items:
            del self.buckets[shape]
            del self.bucket_keys[bisect_left(self.bucket_keys, shape)]

    def _enter(self, i: int) -> None:
        """Put node `i` (in placement) into its bucket and the totals."""
        shape = self.shape[i]
        self._into_bucket(i, shape)
        self._count(i, 1)

    def _leave(self, i: int) -> None:
        """Take node `i` out of its bucket and the totals (nothing when it is out of placement already)."""
        if i in self.off:
            return
        self._out_of_bucket(i, self.shape[i])
        self._count(i, -1)

    def _count(self, i: int, sign: int) -> None:
        """Add node `i` to the totals (`sign` 1) or take it off them (-1)."""
        shape, cls = self.shape[i], self.node_class[i]
        if self.capacity[i] is None:
            self.uncapped += sign
        else:
            self.total_slots += sign * shape.capacity
            self.total_free += sign * shape.free
        if cls.allocatable is not None:
            self.with_resources += sign
        if cls.taints:
            self.tainted += sign
        if cls.unschedulable:
            self.cordoned += sign

    def _nodes_changed(self) -> None:
        self.fit_version += 1
        self._empty = None
        self._left = None

    def _others_changed(self) -> None:
        self.others_version += 1
        self._left = None

    def check_nodes(self) -> None:
        """Recount what the buckets and totals say from the per-node lists (for tests)."""
        active = [i for i in range(len(self.nodes)) if i not in self.off]
        for i in range(len(self.nodes)):
            assert self.shape[i] == self._shape(i), (i, self.shape[i], self._shape(i))
            assert self.node_class[i] is self._class(self.nodes[i])
        assert self.total_slots == sum(self.capacity[i] for i in active if self.capacity[i] is not None)
        assert self.total_free == sum(self.shape[i].free for i in active if self.capacity[i] is not None)
        assert self.uncapped == sum(1 for i in active if self.capacity[i] is None)
        assert self.with_resources == sum(1 for i in active if self.node_class[i].allocatable is not None)
        assert self.tainted == sum(1 for i in active if self.node_class[i].taints)
        assert self.cordoned == sum(1 for i in active if self.node_class[i].unschedulable)
        assert self.bucket_keys == sorted(self.buckets)
        for shape, bucket in self.buckets.items():
            assert bucket.items, shape
            for node in bucket:
                assert node not in self.off and self.shape[node] == shape
        assert sum(len(b) for b in self.buckets.values()) == len(active)


def _add(amounts: dict[str, int], pod: Pod, sign: int) -> None:
    """Add (`sign` 1) or take away (-1) one pod and its requests to `amounts`, keeping no zero amounts."""
    for name, amount in ((PODS, 1),) + pod.requests:
        left = amounts.get(name, 0) + sign * amount
        if left:
            amounts[name] = left
        else:
            del amounts[name]


__all__ = ["NO_SLOT_CAP", "Shape", "NodeClass", "IndexedSet", "NodeTable"]
