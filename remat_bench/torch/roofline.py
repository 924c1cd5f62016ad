"""Durations of a traced program's nodes estimated on a device profile, without running anything.

`import_model(..., device_profile=...)` gives each node the roofline time of
its operator on the profile's device (`remat_bench.core.device_profile.roofline_ns`):
its FLOPs (`remat_bench.torch.importer.node_flops`), the bytes it moves and
the dtype it computes in, all read from the FX metadata of the trace (fake
tensors: shapes and dtypes, no data):

- bytes moved: the bytes of the tensors it reads plus those it writes. A
  tensor read counts its elements, or its storage when that is smaller (a
  broadcast ``expand`` reads its storage once); each value it reads counts
  once; an argument it writes into (``copy_``'s destination) counts as
  written, not read. A gradient copy reads and writes its gradient. Views and
  ``getitem`` are folded into the nodes that read them (`remat_bench.torch.program`)
  and move nothing of their own;
- dtype: its output's first floating-point dtype, else its inputs', else its
  output's (an integer or boolean operator is memory-bound). A float32
  convolution computes in ``tfloat32``, as PyTorch runs it by default
  (``torch.backends.cudnn.allow_tf32`` is True); a float32 matrix product in
  float32 (``torch.backends.cuda.matmul.allow_tf32`` is False by default).

The estimate is not a measurement: it assumes every kernel reaches the
device's peak FLOP/s or bandwidth (times the profile's ``efficiency``), which
small and oddly shaped kernels do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from remat_bench.core.device_profile import DeviceProfile, load_device_profile, roofline_ns
from remat_bench.core.errors import GraphError
from remat_bench.torch.program import GRADIENT, Program, ProgramNode, _written_args, storage_bytes

# The cost record's ``durations`` for roofline estimates (remat_bench.core.provenance).
ROOFLINE = "roofline"
# Convolutions PyTorch runs through cuDNN, in TF32 for float32 tensors by default.
_CONVOLUTIONS = frozenset({torch.ops.aten.convolution, torch.ops.aten.convolution_backward,
                           torch.ops.aten._convolution, torch.ops.aten.cudnn_convolution})


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _read_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel reads of ``t``: its elements, or its storage when smaller (a broadcast view)."""
    return min(t.numel() * t.element_size(), storage_bytes(t))


def _reads(n: fx.Node) -> list[fx.Node]:
    """The FX values an operator reads, each once, in argument order, without those it only writes into."""
    found: list[fx.Node] = []
    fx.node.map_arg((n.args, n.kwargs), found.append)
    written = set(_written_args(n))
    return [a for a in dict.fromkeys(found) if a not in written]


def node_bytes(node: ProgramNode) -> int:
    """Bytes a node's operator moves in device memory: what it reads plus what it writes (module docstring).

    Parameters
    ----------
    node : ProgramNode
        A node of a traced program.

    Returns
    -------
    int
        0 for a node without an FX node (a parameter's gradient that is never computed).
    """
    n = node.fx
    if n is None:
        return 0
    written = sum(t.numel() * t.element_size() for t in _tensors(n.meta.get("val")))
    if node.role == GRADIENT:  # a copy of the value: read once, written once
        return 2 * written
    read = sum(_read_bytes(t) for a in _reads(n) for t in _tensors(a.meta.get("val")))
    return read + written


def node_dtype(node: ProgramNode) -> str:
    """The dtype a node's operator computes in, as `roofline_ns` names it (module docstring).

    Parameters
    ----------
    node : ProgramNode
        A node of a traced program.

    Returns
    -------
    str
        ``float32``, ``tfloat32``, ``bfloat16``, ``int64`` ...; ``float32`` for a node with no tensor at all.
    """
    n = node.fx
    if n is None:
        return "float32"
    outputs = _tensors(n.meta.get("val"))
    inputs = [] if node.role == GRADIENT else [t for a in _reads(n) for t in _tensors(a.meta.get("val"))]
    floating = [t.dtype for t in (*outputs, *inputs) if t.is_floating_point()]
    if floating:
        dtype = floating[0]
    elif outputs or inputs:
        dtype = (outputs or inputs)[0].dtype
    else:
        return "float32"
    name = str(dtype).removeprefix("torch.")
    if name == "float32" and getattr(n.target, "overloadpacket", None) in _CONVOLUTIONS:
        return "tfloat32"
    return name


def roofline_durations(program: Program, profile: DeviceProfile, flops: list[int]) -> list[int]:
    """Each node's roofline time on ``profile``'s device, ns; 0 for a node that runs nothing.

    Parameters
    ----------
    program : Program
        The traced training step.
    profile : DeviceProfile
        The device.
    flops : list of int
        Each node's FLOPs, in node order (`remat_bench.torch.importer.node_flops`).

    Returns
    -------
    list of int
        One per node, in node order.
    """
    return [roofline_ns(count, node_bytes(node), node_dtype(node), profile) if node.fx is not None else 0
            for node, count in zip(program.nodes, flops)]


def profile_asked(device_profile: DeviceProfile | str | Path | None, durations: str) -> DeviceProfile | None:
    """The device profile `import_model` was given, loaded; refused beside durations other than the default.

    Parameters
    ----------
    device_profile : DeviceProfile, str, Path or None
        A profile, a shipped profile's name or a profile file's path (None: none).
    durations : str
        The durations asked for: with a profile, only ``calibrated`` (the default, which the profile
        replaces) is taken.

    Returns
    -------
    DeviceProfile or None

    Raises
    ------
    GraphError
        Durations other than the default beside a profile.
    DeviceProfileError
        A profile that cannot be loaded (`load_device_profile`).
    """
    if device_profile is None:
        return None
    if durations not in ("calibrated", "profile"):
        raise GraphError(f"durations={durations!r} cannot be used with a device profile, whose roofline gives "
                         "the durations; leave durations out")
    if isinstance(device_profile, DeviceProfile):
        return device_profile
    return load_device_profile(device_profile)


def with_roofline(record: dict[str, Any], profile: DeviceProfile) -> dict[str, Any]:
    """An importer's cost record (`remat_bench.torch.importer.cost_record`) for durations estimated on ``profile``.

    Parameters
    ----------
    record : dict
        The record of an import whose durations were not timed.
    profile : DeviceProfile
        The device.

    Returns
    -------
    dict
        A copy with ``durations`` ``roofline``, ``duration_unit`` ``ns``, ``requested.durations``
        ``roofline`` and ``device_profile`` (the profile's figures, `DeviceProfile.as_dict`); what
        `remat_bench.core.provenance.cost_source` reads.
    """
    requested = {**record.get("requested", {}), "durations": ROOFLINE, "device_profile": profile.name}
    return {**record, "durations": ROOFLINE, "duration_unit": "ns", "requested": requested,
            "device_profile": profile.as_dict()}
