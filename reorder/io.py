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

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from .errors import GraphError
from .graph import BufferSpec, Graph, InputSpec, NodeSpec, build_graph, implied_costs
from .sizes import format_size

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


_REQUIRED = object()


@contextlib.contextmanager
def _prefixed(name: str) -> Iterator[None]:
    """Start the message of a :class:`GraphError` raised inside with the graph's name (keeping its class)."""
    try:
        yield
    except GraphError as exc:
        if exc.args and not str(exc.args[0]).startswith(f"{name}:"):
            exc.args = (f"{name}: {exc.args[0]}", *exc.args[1:])
        raise


def _describe(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """One JSON object's fields, each read with its type checked.

    Every error is a :class:`GraphError` that names the object (``where``:
    the node or buffer) and the field, so a malformed file is reported,
    never silently read as a different graph.
    """

    def __init__(self, value: Any, where: str, known: frozenset[str] | None = None):
        if not isinstance(value, dict):
            raise GraphError(f"{where}: expected an object, got {_describe(value)}")
        self.value = value
        self.where = where
        if known is not None and not known.issuperset(value):
            raise GraphError(f"{where}: unknown fields {sorted(set(value) - known)}")

    def _get(self, key: str, default: Any) -> Any:
        if key in self.value:
            return self.value[key]
        if default is _REQUIRED:
            raise GraphError(f"{self.where}: missing field {key!r}")
        return default

    def _wrong(self, key: str, expected: str) -> GraphError:
        return GraphError(f"{self.where} field {key!r}: expected {expected}, got {_describe(self.value[key])}")

    def name(self, key: str = "name", default: Any = _REQUIRED) -> str:
        value = self._get(key, default)
        if value is not default and (not isinstance(value, str) or not value):
            raise self._wrong(key, "a non-empty string")
        return value

    def count(self, key: str, default: Any = _REQUIRED) -> int:
        """A non-negative integer (a byte count or a version)."""
        value = self._get(key, default)
        if value is not default and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise self._wrong(key, "a non-negative integer")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def size(self, key: str, default: Any = _REQUIRED) -> int | str:
        """An integer or an expression text; :func:`reorder.sizes.resolve_size` checks the rest."""
        value = self._get(key, default)
        if value is not default and (isinstance(value, bool) or not isinstance(value, (int, str))):
            raise self._wrong(key, "an integer number of bytes or a size expression")
        return value

    def items(self, key: str, default: Any = _REQUIRED) -> list:
        value = self._get(key, default)
        if not isinstance(value, list):
            raise self._wrong(key, "a list")
        return value

    def names(self, key: str, default: Any = _REQUIRED) -> list[str]:
        value = self.items(key, default)
        for i, v in enumerate(value):
            if not isinstance(v, str) or not v:
                raise GraphError(f"{self.where} field {key!r} entry #{i}: expected a non-empty string, got {_describe(v)}")
        return value

    def mapping(self, key: str) -> dict | None:
        value = self._get(key, None)
        if value is not None and not isinstance(value, dict):
            raise self._wrong(key, "an object")
        return value


class _Parts(NamedTuple):
    """What :func:`~reorder.graph.build_graph` takes, read from a file."""

    name: str
    nodes: list[NodeSpec]
    inputs: list[InputSpec]
    outputs: list[str]
    size_hints: dict | None
    size_ranges: dict | None = None


def _build(parts: _Parts) -> Graph:
    with _prefixed(parts.name):
        return build_graph(parts.nodes, parts.inputs, parts.outputs, name=parts.name, size_hints=parts.size_hints,
                           size_ranges=parts.size_ranges)


class _SimBuffer(NamedTuple):
    """One simulator buffer's fields, checked (a tuple: a 100,000-buffer file holds one per buffer)."""

    size_alloc: int
    size_free: int
    size: int | None
    is_input: bool
    is_output: bool
    deps: list[str]


def graph_from_simulator(data: dict, name: str = "graph") -> Graph:
    """Build a :class:`Graph` from torch's simulator JSON (already parsed)."""
    return _build(_simulator_parts(data, name))


def _simulator_parts(data: dict, name: str) -> _Parts:
    """The specs of torch's simulator JSON, every field checked; ``data`` is not needed afterwards."""
    top = _Fields(data, name)
    by_name: dict[str, _SimBuffer] = {}
    for i, raw in enumerate(top.items("buffers")):
        f = _Fields(raw, f"{name}: buffer #{i}")
        bname = f.name()
        f.where = f"{name}: buffer {bname!r}"
        if bname in by_name:
            raise GraphError(f"{name}: duplicate buffer name {bname!r}")
        by_name[bname] = _SimBuffer(f.count("size_alloc"), f.count("size_free"), f.count("size", None),
                                    f.flag("is_input", False), f.flag("is_output", False), f.names("deps", []))
        f.names("unmet_deps", [])
    for bname, buf in by_name.items():
        for dep in buf.deps:
            if dep not in by_name:
                raise GraphError(f"{name}: buffer {bname!r} field 'deps' names unknown buffer {dep!r}")
    nodes: list[tuple[str, list[str]]] = []
    writer: dict[str, str] = {}
    for i, raw in enumerate(top.items("nodes")):
        f = _Fields(raw, f"{name}: node #{i}")
        nname = f.name()
        f.where = f"{name}: node {nname!r}"
        written = f.names("buffer_names")
        for bname in written:
            if bname not in by_name:
                raise GraphError(f"{name}: node {nname!r} writes buffer {bname!r}, which is not in 'buffers'")
            if bname in writer:
                raise GraphError(f"{name}: buffer {bname!r} has two producers: {writer[bname]!r} and {nname!r}")
            writer[bname] = nname
        nodes.append((nname, written))
    for bname, buf in by_name.items():
        if not buf.is_input and bname not in writer:
            raise GraphError(f"{name}: buffer {bname!r} is neither a graph input nor written by a node")
        if buf.is_input and bname in writer:
            raise GraphError(f"{name}: buffer {bname!r} is marked is_input but node {writer[bname]!r} writes it")

    def is_parent(b: str) -> bool:
        buf = by_name[b]
        return not buf.is_input and buf.size_alloc > 0 and buf.size_free == 0

    node_deps: dict[str, list[str]] = {}
    for nname, written in nodes:
        deps: list[str] = []
        for bname in written:
            deps.extend(by_name[bname].deps)
        node_deps[nname] = list(dict.fromkeys(deps))
    alias = _infer_renames(by_name, writer, node_deps)

    inputs = [InputSpec(bname, buf.size_free, freeable=True) for bname, buf in by_name.items() if buf.is_input]
    node_specs = []
    for nname, written in nodes:
        deps = node_deps[nname]
        parents = [r for r in deps if is_parent(r)]
        # The file's deps are forwarded to rename roots; a node that reads a
        # rename declared only the rename (Inductor's DFS walks declared reads).
        forwarded = {alias[r] for r in deps if r in alias}
        reads = [r for r in deps if r not in forwarded]
        outputs = []
        for bname in written:
            buf = by_name[bname]
            child = buf.size_alloc == 0 and buf.size_free > 0 and parents
            outputs.append(
                BufferSpec(
                    bname,
                    size=buf.size_free if child or buf.size is None else buf.size,
                    parent=parents[0] if child else None,
                    alias_of=alias.get(bname),
                    size_alloc=buf.size_alloc,
                    size_free=buf.size_free,
                )
            )
        node_specs.append(NodeSpec(nname, outputs=outputs, reads=reads))
    outputs = [bname for bname, buf in by_name.items() if buf.is_output]
    return _Parts(name, node_specs, inputs, outputs, None)


def _infer_renames(by_name: dict[str, _SimBuffer], writer: dict, node_deps: dict) -> dict[str, str]:
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
        if buf.size_alloc or buf.size_free or not readers.get(bname):
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


def _symbolic_override(graph: Graph, b: int) -> bool:
    """Whether buffer ``b``'s costs were given as expressions other than the ones its kind implies (a plain
    buffer allocates and frees its size, a child frees it, an alias costs nothing): those a file must say."""
    if graph.size_exprs is None:
        return False
    size = graph.size_exprs.size[b]
    given = (graph.size_exprs.size_alloc[b], graph.size_exprs.size_free[b])
    if given == (None, None):
        return False
    if graph.alias_of[b] is not None:
        implied = (0, 0)
    elif graph.parent[b] is not None:
        implied = (0, size)
    elif graph.children[b]:
        return True  # a sum of the children's sizes, written as the file gave it
    else:
        implied = (size, size)
    return any(g is not None and g != i for g, i in zip(given, implied, strict=True))


def graph_to_dict(graph: Graph) -> dict:
    """The library's own format for ``graph``; fields at their default are left out."""
    names = graph.buffer_names
    implied = implied_costs(graph.size, graph.alias_of, graph.parent)
    inputs = []
    for b in range(graph.num_buffers):
        if graph.is_input[b]:
            entry: dict[str, Any] = {"name": names[b], "size": graph.size_text(b)}
            if not graph.freeable[b]:
                entry["freeable"] = False
            inputs.append(entry)
    nodes = []
    for v in range(graph.num_nodes):
        outs = []
        for b in graph.outputs[v]:
            entry = {"name": names[b], "size": graph.size_text(b)}
            if graph.alias_of[b] is not None:
                entry["alias_of"] = names[graph.alias_of[b]]
                entry["alias_kind"] = graph.alias_kind[b]
            if graph.parent[b] is not None:
                entry["parent"] = names[graph.parent[b]]
            if (graph.size_alloc[b], graph.size_free[b]) != implied[b] or _symbolic_override(graph, b):
                entry["size_alloc"] = graph.size_text(b, "size_alloc")
                entry["size_free"] = graph.size_text(b, "size_free")
            outs.append(entry)
        node: dict[str, Any] = {"name": graph.node_names[v], "outputs": outs,
                                "reads": [names[b] for b in graph.declared_reads[v]]}
        if graph.after[v]:
            node["after"] = [graph.node_names[a] for a in graph.after[v]]
        for key in ("workspace", "unique_workspace"):
            tree = getattr(graph.size_exprs, key)[v] if graph.size_exprs is not None else None
            if tree is not None and type(tree) is not int:
                node[key] = format_size(tree)
            elif getattr(graph, key)[v]:
                node[key] = getattr(graph, key)[v]
        nodes.append(node)
    data: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name}
    if graph.size_hints:
        data["size_hints"] = dict(graph.size_hints)
    if graph.size_ranges:
        data["size_ranges"] = {k: list(r) for k, r in graph.size_ranges.items()}
    data.update(inputs=inputs, nodes=nodes, outputs=[names[b] for b in range(graph.num_buffers) if graph.is_output[b]])
    return data


TOP_FIELDS = frozenset({"format", "version", "name", "size_hints", "size_ranges", "inputs", "nodes", "outputs"})
INPUT_FIELDS = frozenset({"name", "size", "freeable"})
NODE_FIELDS = frozenset({"name", "outputs", "reads", "after", "workspace", "unique_workspace"})
OUTPUT_FIELDS = frozenset({"name", "size", "alias_of", "alias_kind", "parent", "size_alloc", "size_free"})


def graph_from_dict(data: dict) -> Graph:
    """Build a :class:`Graph` from the library's own format (already parsed)."""
    return _build(_own_format_parts(data))


def _own_format_parts(data: dict) -> _Parts:
    """The specs of a file in the library's own format, every field checked; ``data`` is not needed afterwards."""
    top = _Fields(data, "graph", TOP_FIELDS)
    name = top.name("name", "graph")
    top.where = name
    version = top.count("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise GraphError(f"{name}: unsupported {FORMAT_NAME} version {version!r} (this library reads {FORMAT_VERSION})")
    inputs = []
    for i, raw in enumerate(top.items("inputs", [])):
        f = _Fields(raw, f"{name}: input #{i}", INPUT_FIELDS)
        iname = f.name()
        f.where = f"{name}: input {iname!r}"
        inputs.append(InputSpec(iname, f.size("size", 0), freeable=f.flag("freeable", True)))
    nodes = []
    for i, raw in enumerate(top.items("nodes")):
        f = _Fields(raw, f"{name}: node #{i}", NODE_FIELDS)
        nname = f.name()
        f.where = f"{name}: node {nname!r}"
        outs = []
        for j, raw_out in enumerate(f.items("outputs", [])):
            o = _Fields(raw_out, f"{name}: node {nname!r} output #{j}", OUTPUT_FIELDS)
            oname = o.name()
            o.where = f"{name}: buffer {oname!r}"
            outs.append(BufferSpec(
                oname, o.size("size", 0), alias_of=o.name("alias_of", None), alias_kind=o.name("alias_kind", "mutation"),
                parent=o.name("parent", None), size_alloc=o.size("size_alloc", None), size_free=o.size("size_free", None),
            ))
        nodes.append(NodeSpec(nname, outputs=outs, reads=f.names("reads", []), after=f.names("after", []),
                              workspace=f.size("workspace", 0), unique_workspace=f.size("unique_workspace", 0)))
    return _Parts(name, nodes, inputs, top.names("outputs", []), top.mapping("size_hints"), top.mapping("size_ranges"))


def load_graph(path: str | Path, name: str | None = None) -> Graph:
    """Read a graph file in either format; the graph is named after the file unless it names itself.

    Every problem with the file (unreadable, not JSON, nested too deeply,
    wrong fields or types, an invalid graph) is a :class:`GraphError` that
    names the file and, where there is one, the node or buffer and field.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise GraphError(f"no such graph file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphError(f"{path}: cannot read the file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise GraphError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise GraphError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # integers too long to convert
        raise GraphError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise GraphError(f"{path}: expected a JSON object at the top level, got {_describe(data)}")
    if data.get("format") == FORMAT_NAME:
        if name is not None:
            data["name"] = name
        parts = _own_format_parts(data)
    elif "nodes" in data and "buffers" in data:
        parts = _simulator_parts(data, name or path.stem)
    else:
        raise GraphError(f"{path}: neither a {FORMAT_NAME} file nor torch's simulator format (no 'nodes'/'buffers')")
    del data  # the parsed JSON is as large as the specs: let it go before the graph is built
    return _build(parts)


def save_graph(graph: Graph, path: str | Path, fmt: str = "reorder") -> None:
    """Write ``graph`` as ``fmt`` "reorder" (our format) or "simulator" (torch's)."""
    if fmt == "reorder":
        data = graph_to_dict(graph)
    elif fmt == "simulator":
        data = graph_to_simulator(graph)
    else:
        raise GraphError(f"unknown graph format {fmt!r}: use 'reorder' or 'simulator'")
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
