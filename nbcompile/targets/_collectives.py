"""Collectives in an optimised (per-device, SPMD) HLO module, and whether they cross hosts.

Each collective's ``replica_groups`` (every printed syntax: explicit ``{{0,1},{2,3}}``, iota
``[2,4]<=[4,2]T(1,0)`` and mesh axes ``mesh['axis_0'=4,'axis_1'=2] {'axis_0'}``) or
``source_target_pairs`` name partitions; partition ``i`` runs on the
``i``-th device of the mesh (row-major), so the devices' ``process_index`` tells which groups
span more than one host; ``crosses_processes`` says the same of JAX processes (several
processes of one host included, ``docs/processes.md``). Each collective is a
:class:`Collective`: a dict whose keys also read as attributes (``c.collectives[0].op``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..analysis.hlo import (
    Instruction,
    array_shapes,
    parse_hlo,
    parse_replica_groups,
    shape_bytes,
)

__all__ = ["COLLECTIVE_OPS", "Collective", "collectives", "expand_replica_groups"]


class Collective(dict[str, Any]):
    """One collective (see :func:`collectives`); its keys also read as attributes."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"a collective has no field {name!r}") from None


COLLECTIVE_OPS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
)


def expand_replica_groups(text: str | None) -> list[list[int]] | None:
    """Explicit groups from any ``replica_groups`` syntax; [] means "all in one group"; None when
    absent or not understood (:func:`nbcompile.analysis.hlo.parse_replica_groups`)."""
    return parse_replica_groups(text)


def _array_bytes(dtype: str, dims: tuple[int, ...]) -> int:
    return shape_bytes(f"{dtype}[{','.join(map(str, dims))}]")


def _result_bytes(opcode: str, shape: str) -> int:
    arrays = array_shapes(shape)
    if opcode.endswith("-start") and len(arrays) > 1:
        # async starts return (operands..., results..., context): the largest buffer is the payload
        return max(_array_bytes(d, s) for d, s in arrays)
    return shape_bytes(shape)


def _operand_bytes(inst: Instruction, shapes: dict[str, str]) -> int:
    return sum(shape_bytes(shapes.get(name, "")) for name in inst.operands)


def _crosses(groups: list[list[int]] | None, hosts: list[int] | None) -> bool | None:
    if hosts is None or groups is None:
        return None
    if not groups:  # one group of every partition
        return len(set(hosts)) > 1
    if any(i >= len(hosts) for group in groups for i in group):
        return None
    return any(len({hosts[i] for i in group}) > 1 for group in groups)


def collectives(hlo_text: str, devices: Sequence[Any] | None = None) -> list[Collective]:
    """Every collective in ``hlo_text``, in module order.

    Each entry: ``op`` (``all-reduce``, ... without ``-start``), ``name``, ``computation``,
    ``replica_groups`` (raw text), ``groups`` (expanded lists of partition ids; pairs for
    collective-permute), ``bytes`` (result buffer per device), ``operand_bytes``,
    ``crosses_hosts`` (True/False given ``devices`` in mesh order — e.g.
    ``mesh.devices.flat`` — else None), ``crosses_processes`` (its groups hold devices of
    different JAX processes; likewise None without ``devices``) and ``op_name`` (the JAX
    source op).
    """
    hosts = [int(getattr(d, "process_index", 0)) for d in devices] if devices is not None else None
    found: list[Collective] = []
    for computation in parse_hlo(hlo_text).computations.values():
        shapes = {inst.name: inst.shape for inst in computation.instructions}
        for inst in computation.instructions:
            op = inst.opcode.removesuffix("-start")
            if op not in COLLECTIVE_OPS or inst.opcode.endswith("-done"):
                continue
            raw = inst.attrs.get("replica_groups")
            pairs = inst.attrs.get("source_target_pairs")
            groups = expand_replica_groups(pairs if op == "collective-permute" else raw)
            crosses = _crosses(groups, hosts)
            found.append(
                Collective(
                    {
                        "op": op,
                        "name": inst.name,
                        "computation": computation.name,
                        "replica_groups": raw if raw is not None else pairs,
                        "groups": groups,
                        "bytes": _result_bytes(inst.opcode, inst.shape),
                        "operand_bytes": _operand_bytes(inst, shapes),
                        "crosses_hosts": crosses,
                        "crosses_processes": crosses,
                        "op_name": inst.op_name,
                    }
                )
            )
    return found
