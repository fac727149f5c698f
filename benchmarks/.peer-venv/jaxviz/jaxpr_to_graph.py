"""Convert a JAX function's jaxpr into the graph data used by the frontend.

A jaxpr is already a dataflow DAG: each equation is a primitive with SSA-named
input/output variables, so edges follow directly from variable dependencies, and
every variable carries a static shape and dtype (its ``aval``).

Nesting comes only from JAXViz's tagged module-invocation scopes. Framework
adapters add those scopes while tracing; transformation and compiler scopes remain
operation metadata and never become collapsible modules.

Only leaf nodes are emitted into ``adj_list``; the frontend synthesizes the
collapsible module containers from ``ancestor_map``.
"""
import re
from collections import defaultdict

from jax import core as jax_core

try:  # jax >= ~0.5 moved these out of the public jax.core namespace
    _Literal = jax_core.Literal
    _DropVar = jax_core.DropVar
except AttributeError:
    from jax._src.core import Literal as _Literal, DropVar as _DropVar

from .enums import NodeType
from .graph_transforms import build_immediate_ancestor_map
from .hierarchy import validate_collapsible_hierarchy
from ._module_scopes import module_path_from_name_stack


def _shape_str(aval):
    shape = getattr(aval, "shape", None)
    if shape is None:
        return "( )"
    if len(shape) == 0:
        return "( )"
    return f"({', '.join(str(d) for d in shape)})"


def _scope_parts(eqn):
    return module_path_from_name_stack(
        getattr(eqn.source_info, "name_stack", None)
    )


def _safe_id(s):
    """Make a string usable as a Graphviz/DOT node id (frontend renders via DOT).

    DOT rejects '/' , '.' etc. in unquoted ids, so container ids built from scope
    paths like 'MLP/Dense_0' or 'eqx.nn.Linear' must be sanitized to [0-9A-Za-z_].
    """
    return re.sub(r"[^0-9A-Za-z_]", "_", s)


def _scope_containers(parts):
    """Build uniquely identified containers from module invocations."""
    levels = []
    for i in range(1, len(parts) + 1):
        cid = "scope_" + _safe_id("/".join(
            part.identity for part in parts[:i]
        ))
        levels.append((cid, parts[i - 1].name))
    return levels[::-1]  # immediate parent first, root last


def _pretty_primitive_name(eqn):
    """Human-friendlier name for a primitive equation.

    Higher-order primitives (pjit/custom_jvp_call) often wrap a named function
    (e.g. relu). Surface that name when cheaply available, else the primitive name.
    """
    params = eqn.params
    name = params.get("name")
    if isinstance(name, str) and name:
        return name
    if eqn.primitive.name == "custom_jvp_call":
        call_jaxpr = params.get("call_jaxpr")
        inner = getattr(call_jaxpr, "jaxpr", call_jaxpr)
        if inner is not None:
            for sub in inner.eqns:
                inner_name = sub.params.get("name")
                if isinstance(inner_name, str) and inner_name:
                    return inner_name
    return eqn.primitive.name


def _const_value(val):
    """Unwrap a constant scalar to a plain Python value for the click-info popup."""
    try:
        return val.item() if hasattr(val, "item") else val
    except Exception:
        return str(val)


def _format_operand(atom):
    """Describe a jaxpr operand for the click-info popup: a tensor operand as its
    shape and dtype, an inline literal as its value.
    """
    if isinstance(atom, _Literal):
        return _const_value(getattr(atom, "val", None))
    aval = getattr(atom, "aval", None)
    return {
        "_type": "tensor",
        "shape": list(getattr(aval, "shape", ()) or ()),
        "dtype": str(getattr(aval, "dtype", "")),
    }


def build_graph(closed_jaxpr, show_constants=False):
    """Walk a ClosedJaxpr and produce the torchvista frontend blobs.

    When ``show_constants`` is True, inline literal operands and scalar closed-over
    constants are drawn as ``Constant`` nodes; otherwise they are omitted (so ops fed
    only by constants, e.g. a ``sqrt`` scaling factor, appear without inputs).

    Returns a dict of all structures plot_graph expects.
    """
    jaxpr = closed_jaxpr.jaxpr
    consts = list(getattr(closed_jaxpr, "consts", []))

    adj_list = {}
    func_info = {}
    module_info = {}
    graph_node_display_names = {}
    graph_node_name_to_without_suffix = {}
    node_to_module_path = {}
    node_to_ancestors = {}
    parent_module_to_nodes = defaultdict(list)
    parent_module_to_depth = {}

    # Map each jaxpr Var -> the node name that produces it.
    var_to_source = {}
    counter = [0]

    def new_node(base):
        counter[0] += 1
        # Sanitize the id (DOT-safe) but keep the raw base for the display name.
        return f"{_safe_id(base)}_{counter[0]}"

    def register_container_labels(containers):
        # containers is [(container_id, label), ...] immediate-first
        for cid, label in containers:
            if cid in graph_node_display_names:
                continue
            graph_node_display_names[cid] = label
            # Strip a trailing _<idx> so the module *type* reads cleanly (Dense_0 -> Dense)
            without = label
            if "_" in label and label.rsplit("_", 1)[-1].isdigit():
                without = label.rsplit("_", 1)[0]
            graph_node_name_to_without_suffix[cid] = without
            module_info[cid] = {"type": without, "parameters": {}, "attributes": {}}

    seen_edges = set()
    assigned_parameter_scopes = set()

    def add_edge(src_node, dst_node, var):
        # edge_data_id identifies the *tensor* (the jaxpr Var, shared across all its
        # uses), so the frontend can merge edges carrying the same tensor into a
        # collapsed container while keeping distinct tensors separate.
        edge_data_id = id(var)
        edge_key = (src_node, dst_node, edge_data_id)
        if edge_key in seen_edges:
            return
        seen_edges.add(edge_key)
        adj_list[src_node]["edges"].append({
            "target": dst_node,
            "dims": _shape_str(var.aval),
            "edge_data_id": edge_data_id,
        })

    def add_constant_input(op_node, literals, container_ids):
        # One Constant node per op, combining that op's inline literal operands
        # (mirrors torchvista's "N scalars" grouping to avoid clutter). Nodes are
        # labelled generically; the actual values go in func_info for the click popup.
        const_node = new_node("const")
        if len(literals) == 1:
            label = "scalar"
            dims = _shape_str(literals[0].aval)
        else:
            label = f"{len(literals)} scalars"
            dims = f"( ) x {len(literals)}"
        adj_list[const_node] = {"edges": [], "failed": False, "node_type": NodeType.CONSTANT.value}
        graph_node_display_names[const_node] = label
        graph_node_name_to_without_suffix[const_node] = "scalar"
        node_to_ancestors[const_node] = list(container_ids)
        func_info[const_node] = {"values": [_const_value(getattr(lit, "val", None)) for lit in literals]}
        adj_list[const_node]["edges"].append({
            "target": op_node,
            "dims": dims,
            "edge_data_id": const_node,
        })

    # --- Inputs: the jaxpr's invars are the real function arguments ---
    for i, var in enumerate(jaxpr.invars):
        node = f"input_{i}"
        adj_list[node] = {"edges": [], "failed": False, "node_type": NodeType.INPUT.value}
        graph_node_display_names[node] = f"input_{i}"
        graph_node_name_to_without_suffix[node] = "input"
        node_to_ancestors[node] = []
        var_to_source[var] = node

    # --- Closed-over values: arrays are weights (Parameter); scalars are constants ---
    for i, var in enumerate(jaxpr.constvars):
        if show_constants and getattr(var.aval, "shape", ()) == ():
            node = new_node("const")
            adj_list[node] = {"edges": [], "failed": False, "node_type": NodeType.CONSTANT.value}
            val = consts[i] if i < len(consts) else None
            graph_node_display_names[node] = "scalar"
            graph_node_name_to_without_suffix[node] = "scalar"
            func_info[node] = {"value": _const_value(val)}
        else:
            node = f"param_{i}"
            adj_list[node] = {"edges": [], "failed": False, "node_type": NodeType.PARAMETER.value}
            graph_node_display_names[node] = "param"
            graph_node_name_to_without_suffix[node] = "param"
        # Parameter ancestry is narrowed to the common scope of all consumers.
        node_to_ancestors[node] = []
        var_to_source[var] = node

    def maybe_assign_param_scope(src_node, container_ids):
        if not (src_node.startswith("param_") or src_node.startswith("const_")):
            return
        if src_node not in assigned_parameter_scopes:
            node_to_ancestors[src_node] = list(container_ids)
            assigned_parameter_scopes.add(src_node)
            return
        common = set(node_to_ancestors[src_node]).intersection(container_ids)
        node_to_ancestors[src_node] = [
            container for container in node_to_ancestors[src_node]
            if container in common
        ]

    # --- Equations become leaf nodes ---
    for eqn in jaxpr.eqns:
        parts = _scope_parts(eqn)          # root first
        containers = _scope_containers(parts)          # [(id, label), ...] immediate first
        container_ids = [cid for cid, _ in containers]
        register_container_labels(containers)

        base = _pretty_primitive_name(eqn)
        node = new_node(base)
        adj_list[node] = {"edges": [], "failed": False, "node_type": NodeType.OPERATION.value}
        graph_node_display_names[node] = base
        graph_node_name_to_without_suffix[node] = base
        node_to_module_path[node] = eqn.primitive.name
        node_to_ancestors[node] = list(container_ids)

        # Record this node under every ancestor container, tracking each container's
        # subtree depth (distance down to its deepest leaf).
        depth = 1
        for cid in container_ids:
            parent_module_to_nodes[cid].append(node)
            parent_module_to_depth[cid] = max(depth, parent_module_to_depth.get(cid, 0))
            depth += 1

        # Edges in: connect input vars; gather inline literal operands separately
        literal_inputs = []
        for invar in eqn.invars:
            if isinstance(invar, _Literal):
                literal_inputs.append(invar)
                continue
            src = var_to_source.get(invar)
            if src is None:
                continue
            maybe_assign_param_scope(src, container_ids)
            add_edge(src, node, invar)

        if show_constants and literal_inputs:
            add_constant_input(node, literal_inputs, container_ids)

        # Click-info: the operands the op was called with, plus its static params.
        func_info[node] = {
            "positional_args": [_format_operand(a) for a in eqn.invars],
            "keyword_args": {k: str(v)[:80] for k, v in eqn.params.items()
                             if k not in ("jaxpr", "call_jaxpr", "branches", "jvp_jaxpr_thunk")},
        }

        # Outputs: this node produces these vars
        for outvar in eqn.outvars:
            if isinstance(outvar, _DropVar):
                continue
            var_to_source[outvar] = node

    # --- Outputs ---
    for i, outvar in enumerate(jaxpr.outvars):
        node = f"output_{i}"
        adj_list[node] = {"edges": [], "failed": False, "node_type": NodeType.OUTPUT.value}
        graph_node_display_names[node] = f"output_{i}"
        graph_node_name_to_without_suffix[node] = "output"
        node_to_ancestors[node] = []
        if isinstance(outvar, _Literal):
            continue
        src = var_to_source.get(outvar)
        if src is not None:
            add_edge(src, node, outvar)

    ancestor_map = build_immediate_ancestor_map(node_to_ancestors, adj_list)
    validate_collapsible_hierarchy(adj_list, ancestor_map, module_info)

    return {
        "adj_list": adj_list,
        "module_info": module_info,
        "func_info": func_info,
        "node_to_module_path": node_to_module_path,
        "parent_module_to_nodes": dict(parent_module_to_nodes),
        "parent_module_to_depth": parent_module_to_depth,
        "graph_node_name_to_without_suffix": graph_node_name_to_without_suffix,
        "graph_node_display_names": graph_node_display_names,
        "node_to_attr_name": {},
        "ancestor_map": ancestor_map,
        "repeat_containers": [],
    }
