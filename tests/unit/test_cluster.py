"""coach.cluster: a cluster file becomes a ClusterSpec, or every problem becomes one line.

Error lines read ``FILE: FIELD: what is wrong`` where FILE is the path as given and FIELD is
the key (``nodes[i].key`` inside a node, ``(file)`` for the file as a whole).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.domain.cluster import DEFAULT_CLUSTER, ClusterSpec, NodeSpec

from coach.inputs.cluster import ClusterFileError, load_cluster, parse_cluster

PRICE = "price_per_slot_s: 0.0001\n"
ONE_NODE = PRICE + "nodes:\n  - name: a\n    slots: 1\n"


def write(tmp_path: Path, text: str, filename: str = "cluster.yaml") -> Path:
    path = tmp_path / filename
    path.write_text(text)
    return path


def error_lines(path: Path) -> list[str]:
    """The lines of the ClusterFileError that loading `path` raises."""
    with pytest.raises(ClusterFileError) as caught:
        load_cluster(path)
    return caught.value.lines


# --------------------------------------------------------------------------- the default cluster


def test_no_path_gives_the_default_cluster_of_three_nodes_with_four_slots_each():
    cluster = load_cluster(None)

    assert cluster is DEFAULT_CLUSTER
    assert cluster.name == "thesis-3-nodes"
    assert cluster.source == "(default)"
    assert cluster.nodes == (
        NodeSpec("node-1", slots=4, price_per_slot_s=0.0001),
        NodeSpec("node-2", slots=4, price_per_slot_s=0.0001),
        NodeSpec("node-3", slots=4, price_per_slot_s=0.0001),
    )
    assert cluster.total_slots == 12


def test_the_shipped_thesis_cluster_file_matches_the_default_cluster():
    shipped = load_cluster(Path(__file__).resolve().parents[2] / "jobs" / "clusters" / "thesis.yaml")

    assert shipped.name == DEFAULT_CLUSTER.name
    assert shipped.nodes == DEFAULT_CLUSTER.nodes


# --------------------------------------------------------------------------- valid files


def test_a_node_price_overrides_the_cluster_price_and_nodes_keep_file_order(tmp_path):
    path = write(tmp_path, (
        "name: lab\n"
        "price_per_slot_s: 0.0002\n"
        "nodes:\n"
        "  - name: zeta\n"
        "    slots: 2\n"
        "  - name: alpha\n"
        "    slots: 3\n"
        "    price_per_slot_s: 0.0005\n"
    ))

    cluster = load_cluster(path)

    assert cluster == ClusterSpec(
        name="lab",
        nodes=(NodeSpec("zeta", 2, 0.0002), NodeSpec("alpha", 3, 0.0005)),
        source=str(path),
    )
    assert cluster.total_slots == 5
    assert cluster.price_of("alpha") == 0.0005
    assert cluster.price_of("zeta") == 0.0002
    assert cluster.node("alpha").slots == 3


def test_the_name_defaults_to_the_file_stem(tmp_path):
    cluster = load_cluster(write(tmp_path, ONE_NODE, "small-lab.yaml"))

    assert cluster.name == "small-lab"
    assert cluster.nodes == (NodeSpec("a", 1, 0.0001),)


def test_a_free_cluster_says_so_with_a_price_of_zero(tmp_path):
    cluster = load_cluster(write(tmp_path, "price_per_slot_s: 0\nnodes:\n  - {name: a, slots: 1}\n"))

    assert cluster.nodes == (NodeSpec("a", 1, 0.0),)


def test_a_cluster_without_any_price_is_an_error_naming_the_field(tmp_path):
    path = write(tmp_path, "nodes:\n  - {name: a, slots: 1}\n")

    assert error_lines(path) == [f"{path}: price_per_slot_s: required field missing (no price for nodes[0]; "
                                 "set it at the top level or on every node)"]


def test_nodes_without_a_price_of_their_own_need_the_top_level_one(tmp_path):
    path = write(tmp_path, "nodes:\n" + "".join(f"  - {{name: n{i}, slots: 1}}\n" for i in range(5))
                 + "  - {name: priced, slots: 1, price_per_slot_s: 0.1}\n")

    assert error_lines(path) == [f"{path}: price_per_slot_s: required field missing (no price for nodes[0], "
                                 "nodes[1], nodes[2] and 2 more; set it at the top level or on every node)"]


def test_every_node_priced_needs_no_top_level_price(tmp_path):
    cluster = load_cluster(write(tmp_path, "nodes:\n  - {name: a, slots: 1, price_per_slot_s: 0.5}\n"))

    assert cluster.nodes == (NodeSpec("a", 1, 0.5),)


def test_a_price_in_yaml_1_2_exponent_form_is_a_number(tmp_path):
    cluster = load_cluster(write(tmp_path, "price_per_slot_s: 1e-4\nnodes:\n  - {name: a, slots: 1}\n"))

    assert cluster.nodes == (NodeSpec("a", 1, 0.0001),)


def test_an_integer_price_is_stored_as_a_float(tmp_path):
    cluster = load_cluster(write(tmp_path, "nodes:\n  - {name: a, slots: 1, price_per_slot_s: 2}\n"))

    assert cluster.nodes[0].price_per_slot_s == 2.0
    assert isinstance(cluster.nodes[0].price_per_slot_s, float)


def test_to_dict_lists_the_nodes_in_order():
    assert DEFAULT_CLUSTER.to_dict() == {
        "name": "thesis-3-nodes",
        "source": "(default)",
        "scheduler": None,
        "nodes": [{"name": f"node-{i}", "slots": 4, "price_per_slot_s": 0.0001} for i in (1, 2, 3)],
    }


# --------------------------------------------------------------------------- bad files, one line per problem


def test_unknown_top_level_field(tmp_path):
    path = write(tmp_path, "colour: red\n" + ONE_NODE)

    assert error_lines(path) == [f"{path}: colour: unknown field"]


def test_unknown_node_field(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - name: a\n    slots: 1\n    gpus: 2\n")

    assert error_lines(path) == [f"{path}: nodes[0].gpus: unknown field"]


def test_missing_nodes(tmp_path):
    path = write(tmp_path, "name: lab\n")

    assert error_lines(path) == [f"{path}: nodes: required, a non-empty list of nodes"]


def test_empty_nodes(tmp_path):
    path = write(tmp_path, "nodes: []\n")

    assert error_lines(path) == [f"{path}: nodes: required, a non-empty list of nodes"]


def test_zero_slots(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - name: a\n    slots: 0\n")

    assert error_lines(path) == [f"{path}: nodes[0].slots: must be > 0, got 0"]


def test_slots_written_as_a_word(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - name: a\n    slots: four\n")

    assert error_lines(path) == [f"{path}: nodes[0].slots: expected an integer, got str"]


def test_missing_slots(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - name: a\n")

    assert error_lines(path) == [f"{path}: nodes[0].slots: required field missing"]


def test_negative_node_price(tmp_path):
    path = write(tmp_path, "nodes:\n  - name: a\n    slots: 1\n    price_per_slot_s: -1\n")

    assert error_lines(path) == [f"{path}: nodes[0].price_per_slot_s: must be >= 0, got -1"]


def test_duplicate_node_names(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - {name: a, slots: 1}\n  - {name: b, slots: 1}\n"
                 "  - {name: a, slots: 2}\n")

    assert error_lines(path) == [f"{path}: nodes[2].name: duplicate node name 'a'"]


def test_a_node_name_with_a_space(tmp_path):
    path = write(tmp_path, PRICE + "nodes:\n  - {name: 'node 1', slots: 1}\n")

    assert error_lines(path) == [f"{path}: nodes[0].name: required, letters, digits, '.', '_' or '-'"]


def test_a_node_name_ending_in_a_newline_is_rejected(tmp_path):
    # `$` in the NODE_NAME pattern also matches just before a final newline; the whole name must match.
    path = write(tmp_path, PRICE + 'nodes:\n  - {name: "a\\n", slots: 1}\n')

    assert error_lines(path) == [f"{path}: nodes[0].name: required, letters, digits, '.', '_' or '-'"]


def test_a_node_name_that_is_a_list_is_reported_not_raised(tmp_path):
    # A typo such as `name: [a, b]` must become an error line like any other bad name,
    # not a TypeError from putting the list into the set of seen names.
    path = write(tmp_path, PRICE + "nodes:\n  - {name: [a, b], slots: 1}\n")

    assert error_lines(path) == [f"{path}: nodes[0].name: required, letters, digits, '.', '_' or '-'"]


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "nodes:\n\t- name: a\n")  # a tab cannot start a YAML token

    assert error_lines(path) == [f"{path}: (file): invalid YAML at line 2"]


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.yaml"

    assert error_lines(path) == [f"{path}: (file): No such file or directory"]


def test_a_file_that_is_not_a_mapping(tmp_path):
    path = write(tmp_path, "- a\n- b\n")

    assert error_lines(path) == [f"{path}: (file): expected a mapping with 'nodes'"]


def test_every_problem_of_a_file_is_reported_at_once_in_file_order(tmp_path):
    path = write(tmp_path, (
        "colour: red\n"
        + PRICE +
        "nodes:\n"
        "  - {name: a, slots: 0}\n"
        "  - {name: b, slots: 2, price_per_slot_s: -0.5}\n"
    ))

    with pytest.raises(ClusterFileError) as caught:
        load_cluster(path)

    assert caught.value.lines == [
        f"{path}: colour: unknown field",
        f"{path}: nodes[0].slots: must be > 0, got 0",
        f"{path}: nodes[1].price_per_slot_s: must be >= 0, got -0.5",
    ]
    assert str(caught.value) == "\n".join(caught.value.lines)


def test_parse_cluster_uses_the_source_it_is_given():
    with pytest.raises(ClusterFileError) as caught:
        parse_cluster({"price_per_slot_s": 0.0, "nodes": [{"name": "a", "slots": True}]}, "inline")

    assert caught.value.lines == ["inline: nodes[0].slots: expected an integer, got bool"]


# --------------------------------------------------------------------------- bounds


def test_the_largest_allowed_slots_and_price_are_accepted(tmp_path):
    cluster = load_cluster(write(tmp_path, "price_per_slot_s: 1e6\nnodes:\n  - {name: a, slots: 100000}\n"))

    assert cluster.nodes == (NodeSpec("a", 100_000, 1e6),)


@pytest.mark.parametrize(("text", "expected"), [
    ("nodes:\n  - {name: a, slots: 100001}\n", "nodes[0].slots: must be <= 100000, got 100001"),
    ("nodes:\n  - {name: a, slots: 1, price_per_slot_s: 1000001}\n",
     "nodes[0].price_per_slot_s: must be <= 1e+06, got 1000001"),
    ("nodes:\n  - {name: a, slots: 1, price_per_slot_s: .nan}\n", "nodes[0].price_per_slot_s: must be >= 0, got nan"),
    ("nodes:\n  - {name: a, slots: 1, price_per_slot_s: .inf}\n", "nodes[0].price_per_slot_s: must be >= 0, got inf"),
])
def test_one_past_a_bound_is_one_line(tmp_path, text, expected):
    path = write(tmp_path, PRICE + text)

    assert error_lines(path) == [f"{path}: {expected}"]


def test_at_most_100000_nodes():
    nodes = [{"name": f"n{i}", "slots": 1} for i in range(100_001)]

    with pytest.raises(ClusterFileError) as caught:
        parse_cluster({"price_per_slot_s": 0.0, "nodes": nodes}, "big")

    assert caught.value.lines == ["big: nodes: at most 100000 nodes, got 100001"]


def test_an_invalid_top_level_price_is_reported_once_not_raised(tmp_path):
    # Nodes inherit the top-level price; an invalid one must not reach float() for them.
    path = write(tmp_path, "price_per_slot_s: [1]\nnodes:\n  - {name: a, slots: 1}\n  - {name: b, slots: 1}\n")

    assert error_lines(path) == [f"{path}: price_per_slot_s: expected a number, got list"]


def test_a_scheduler_that_is_a_list_is_reported_not_raised(tmp_path):
    path = write(tmp_path, ONE_NODE + "scheduler: [gang]\n")

    assert error_lines(path) == [f"{path}: scheduler: unknown profile ['gang']; known: default, gang, gang-pack, "
                                 "gang-strict, gang-thesis"]


def test_a_cluster_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"name: \xff\n")

    assert error_lines(path) == [f"{path}: (file): not UTF-8 text (byte 6)"]


def test_a_long_cluster_name_is_refused_and_cut(tmp_path):
    path = write(tmp_path, "name: " + "x" * 10_000 + "\n" + ONE_NODE)

    assert error_lines(path) == [f"{path}: name: must be 1-128 printable characters, got '{'x' * 36}..."]
