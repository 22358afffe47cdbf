"""Reading and writing graph files.

Two formats (both JSON; ``docs/format.md`` describes them field by field):

* torch's *simulator* format, written by Inductor 2.13's
  ``export_graph_for_simulator``: ``{"nodes": [{name, buffer_names}],
  "buffers": [{name, size_alloc, size_free, size, is_input, is_output, deps,
  unmet_deps}]}``. A node reads the ``deps`` of its output buffers. It cannot
  say ordering-only edges, alias chains, symbolic sizes or a graph name;
  multi-output parents and children are recognised from their sizes.
* the library's own format (``"format": "reorder-graph"``), which can.

:func:`load_graph` reads either, telling them apart by their keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import GraphError
from .graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph, implied_costs

__all__ = [
    "load_graph",
    "save_graph",
    "graph_from_simulator",
    "graph_to_simulator",
    "graph_from_dict",
    "graph_to_dict",
    "FORMAT_NAME",
]

FORMAT_NAME = "reorder-graph"
FORMAT_VERSION = 1


def _require(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise GraphError(f"{where}: missing field {key!r}")
    return obj[key]


def _list(obj: Any, where: str) -> list:
    if not isinstance(obj, list):
        raise GraphError(f"{where}: expected a list, got {type(obj).__name__}")
    return obj


def graph_from_simulator(data: dict, name: str = "graph") -> Graph:
    """Build a :class:`Graph` from torch's simulator JSON (already parsed)."""
    buffers = _list(_require(data, "buffers", name), f"{name}: buffers")
    nodes = _list(_require(data, "nodes", name), f"{name}: nodes")
    by_name: dict[str, dict] = {}
    for i, buf in enumerate(buffers):
        bname = _require(buf, "name", f"{name}: buffer #{i}")
        if bname in by_name:
            raise GraphError(f"{name}: duplicate buffer name {bname!r}")
        by_name[bname] = buf

    writer: dict[str, str] = {}
    for i, node in enumerate(nodes):
        nname = _require(node, "name", f"{name}: node #{i}")
        for bname in _list(_require(node, "buffer_names", f"{name}: node {nname!r}"), f"node {nname!r}"):
            if bname not in by_name:
                raise GraphError(f"{name}: node {nname!r} writes buffer {bname!r}, which is not in 'buffers'")
            if bname in writer:
                raise GraphError(f"{name}: buffer {bname!r} has two producers: {writer[bname]!r} and {nname!r}")
            writer[bname] = nname
    for bname, buf in by_name.items():
        if not buf.get("is_input") and bname not in writer:
            raise GraphError(f"{name}: buffer {bname!r} is neither a graph input nor written by a node")

    def is_parent(b: str) -> bool:
        buf = by_name.get(b)
        return buf is not None and not buf.get("is_input") and buf["size_alloc"] > 0 and buf["size_free"] == 0

    node_deps: dict[str, list[str]] = {}
    for node in nodes:
        deps: list[str] = []
        for bname in node["buffer_names"]:
            deps.extend(_list(by_name[bname].get("deps", []), f"buffer {bname!r} deps"))
        node_deps[node["name"]] = list(dict.fromkeys(deps))
    alias = _infer_renames(by_name, writer, node_deps)

    inputs = [
        InputSpec(b["name"], b.get("size_free", b.get("size", 0)), freeable=True)
        for b in buffers
        if b.get("is_input")
    ]
    node_specs = []
    for node in nodes:
        deps = node_deps[node["name"]]
        parents = [r for r in deps if is_parent(r)]
        # The file's deps are forwarded to rename roots; a node that reads a
        # rename declared only the rename (Inductor's DFS walks declared reads).
        forwarded = {alias[r] for r in deps if r in alias}
        reads = [r for r in deps if r not in forwarded]
        outputs = []
        for bname in node["buffer_names"]:
            buf = by_name[bname]
            child = buf["size_alloc"] == 0 and buf["size_free"] > 0 and parents
            outputs.append(
                BufferSpec(
                    bname,
                    size=buf["size_free"] if child else buf.get("size", buf["size_free"]),
                    parent=parents[0] if child else None,
                    alias_of=alias.get(bname),
                    size_alloc=buf["size_alloc"],
                    size_free=buf["size_free"],
                )
            )
        node_specs.append(NodeSpec(node["name"], outputs=outputs, reads=reads))
    outputs = [b["name"] for b in buffers if b.get("is_output")]
    return build_graph(node_specs, inputs, outputs, name=name)


def _infer_renames(by_name: dict, writer: dict, node_deps: dict) -> dict[str, str]:
    """Recover mutation renames that the simulator format flattens.

    A rename costs nothing (``size_alloc == size_free == 0``) and Inductor
    forwards its readers to the real buffer, so every reader of a rename also
    lists the real buffer in its deps, and the renaming node reads it. The real
    buffer is the first of the renaming node's deps that every reader of the
    rename also lists.
    """
    readers: dict[str, list[str]] = {}
    for node, deps in node_deps.items():
        for d in deps:
            readers.setdefault(d, []).append(node)
    alias: dict[str, str] = {}
    for bname, node in writer.items():
        buf = by_name[bname]
        if buf["size_alloc"] or buf["size_free"] or not readers.get(bname):
            continue
        for real in node_deps[node]:
            if real != bname and all(real in node_deps[r] for r in readers[bname]):
                alias[bname] = real
                break
    return alias


def graph_to_simulator(graph: Graph) -> dict:
    """torch's simulator JSON for ``graph``.

    The format has no place for ordering-only edges, alias links or symbolic
    sizes, and torch leaves non-freeable inputs out; those are dropped.
    """
    buffers = []
    for b in range(graph.num_buffers):
        if graph.is_input[b] and graph.freeable[b]:
            size = graph.size_free[b]
            buffers.append(
                dict(name=graph.buffer_names[b], size_alloc=size, size_free=size, size=size,
                     is_input=True, is_output=graph.is_output[b], deps=[], unmet_deps=[])
            )
    for b in range(graph.num_buffers):
        p = graph.producer[b]
        if p is None:
            continue
        deps = [graph.buffer_names[r] for r in graph.reads[p] if not (graph.is_input[r] and not graph.freeable[r])]
        buffers.append(
            dict(
                name=graph.buffer_names[b],
                size_alloc=graph.size_alloc[b],
                size_free=graph.size_free[b],
                size=graph.size_free[b],
                is_input=False,
                is_output=graph.is_output[b],
                deps=deps,
                unmet_deps=[graph.buffer_names[r] for r in graph.reads[p] if not graph.is_input[r]],
            )
        )
    nodes = [
        dict(name=graph.node_names[v], buffer_names=[graph.buffer_names[b] for b in graph.outputs[v]])
        for v in range(graph.num_nodes)
    ]
    return {"nodes": nodes, "buffers": buffers}


def _size_field(graph: Graph, b: int) -> int | str:
    return graph.symbolic_size[b] if graph.symbolic_size[b] is not None else graph.size[b]


def graph_to_dict(graph: Graph) -> dict:
    """The library's own format for ``graph``; fields at their default are left out."""
    names = graph.buffer_names
    implied = implied_costs(graph.size, graph.alias_of, graph.parent)
    inputs = []
    for b in range(graph.num_buffers):
        if graph.is_input[b]:
            entry: dict[str, Any] = {"name": names[b], "size": _size_field(graph, b)}
            if not graph.freeable[b]:
                entry["freeable"] = False
            inputs.append(entry)
    nodes = []
    for v in range(graph.num_nodes):
        outs = []
        for b in graph.outputs[v]:
            entry = {"name": names[b], "size": _size_field(graph, b)}
            if graph.alias_of[b] is not None:
                entry["alias_of"] = names[graph.alias_of[b]]
                entry["alias_kind"] = graph.alias_kind[b]
            if graph.parent[b] is not None:
                entry["parent"] = names[graph.parent[b]]
            if (graph.size_alloc[b], graph.size_free[b]) != implied[b]:
                entry["size_alloc"] = graph.size_alloc[b]
                entry["size_free"] = graph.size_free[b]
            outs.append(entry)
        node: dict[str, Any] = {"name": graph.node_names[v], "outputs": outs,
                                "reads": [names[b] for b in graph.declared_reads[v]]}
        if graph.after[v]:
            node["after"] = [graph.node_names[a] for a in graph.after[v]]
        if graph.workspace[v]:
            node["workspace"] = graph.workspace[v]
        if graph.unique_workspace[v]:
            node["unique_workspace"] = graph.unique_workspace[v]
        nodes.append(node)
    data: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name}
    if graph.size_hints:
        data["size_hints"] = dict(graph.size_hints)
    data.update(inputs=inputs, nodes=nodes, outputs=[names[b] for b in range(graph.num_buffers) if graph.is_output[b]])
    return data


def graph_from_dict(data: dict) -> Graph:
    """Build a :class:`Graph` from the library's own format (already parsed)."""
    name = data.get("name", "graph")
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise GraphError(f"{name}: unsupported {FORMAT_NAME} version {version!r} (this library reads {FORMAT_VERSION})")
    inputs = []
    for i, entry in enumerate(_list(data.get("inputs", []), f"{name}: inputs")):
        inputs.append(InputSpec(_require(entry, "name", f"{name}: input #{i}"), entry.get("size", 0),
                                freeable=entry.get("freeable", True)))
    nodes = []
    for i, entry in enumerate(_list(_require(data, "nodes", name), f"{name}: nodes")):
        nname = _require(entry, "name", f"{name}: node #{i}")
        outs = []
        for j, out in enumerate(_list(entry.get("outputs", []), f"node {nname!r} outputs")):
            known = {"name", "size", "alias_of", "alias_kind", "parent", "size_alloc", "size_free"}
            extra = set(out) - known if isinstance(out, dict) else set()
            if extra:
                raise GraphError(f"node {nname!r} output #{j}: unknown fields {sorted(extra)}")
            outs.append(BufferSpec(**{"name": _require(out, "name", f"node {nname!r} output #{j}"), **out}))
        nodes.append(NodeSpec(nname, outputs=outs, reads=entry.get("reads", []), after=entry.get("after", []),
                              workspace=entry.get("workspace", 0), unique_workspace=entry.get("unique_workspace", 0)))
    return build_graph(nodes, inputs, data.get("outputs", []), name=name, size_hints=data.get("size_hints"))


def load_graph(path: str | Path, name: str | None = None) -> Graph:
    """Read a graph file in either format; the graph is named after the file unless it names itself."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GraphError(f"no such graph file: {path}") from None
    except json.JSONDecodeError as exc:
        raise GraphError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise GraphError(f"{path}: expected a JSON object at the top level")
    if data.get("format") == FORMAT_NAME:
        return graph_from_dict(data if name is None else {**data, "name": name})
    if "nodes" in data and "buffers" in data:
        return graph_from_simulator(data, name=name or path.stem)
    raise GraphError(f"{path}: neither a {FORMAT_NAME} file nor torch's simulator format (no 'nodes'/'buffers')")


def save_graph(graph: Graph, path: str | Path, fmt: str = "reorder") -> None:
    """Write ``graph`` as ``fmt`` "reorder" (our format) or "simulator" (torch's)."""
    if fmt == "reorder":
        data = graph_to_dict(graph)
    elif fmt == "simulator":
        data = graph_to_simulator(graph)
    else:
        raise GraphError(f"unknown graph format {fmt!r}: use 'reorder' or 'simulator'")
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
