"""Device profiles: a GPU's published figures, and the roofline time an operator takes on it.

A laptop cannot time operators on an H100, but it can estimate them. A
`DeviceProfile` holds what a vendor's data sheet says of a device: its peak
FLOP/s by dtype, its memory bandwidth, its host link, and a fixed cost per
operator. `roofline_ns` estimates an operator's time from its FLOPs and the
bytes it moves by the roofline model (Williams, Waterman and Patterson,
"Roofline: an insightful visual performance model for multicore
architectures", CACM 52(4), 2009):

    t = launch + max(flops / (efficiency * peak(dtype)), bytes / (efficiency * bandwidth))

an operator is bound either by arithmetic or by memory traffic, whichever
takes longer, and pays the launch cost either way. It is an estimate, not a
measurement: real kernels reach a fraction of peak that varies by shape
(`efficiency` stays 1.0 until a measurement says otherwise).

The shipped profiles (`shipped_profiles`) are in the package's
``data/device_profiles.yaml``, with the data sheet each comes from; a user's
own is a small YAML or JSON file of the same fields (`load_device_profile`,
docs/design.md section 3), checked against
``core/schema/device_profile.schema.json``.

This module imports no PyTorch: `remat_bench.torch.roofline` reads the FLOPs,
bytes and dtypes of a traced program's operators.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from remat_bench.core.errors import DeviceProfileError, printable
from remat_bench.core.files import read_regular
from remat_bench.core.graph import Link, Transfer
from remat_bench.core.json_files import describe_schema_error, schema

# The most bytes of a user's profile file: a profile is a dozen lines.
MAX_PROFILE_BYTES = 1 << 20
SHIPPED = "data/device_profiles.yaml"

# The peaks a dtype's operators run at, in order of preference: a profile without a dtype's own peak uses the
# next one it has (bfloat16 and float16 run on the same tensor cores at the same rate on every GPU shipped here).
# float32 is every profile's last resort; a dtype not listed (float8, complex) uses float32.
FALLBACK: dict[str, tuple[str, ...]] = {
    "bfloat16": ("bfloat16", "float16", "float32"),
    "float16": ("float16", "bfloat16", "float32"),
    "tfloat32": ("tfloat32", "float32"),
    "float32": ("float32",),
    "float64": ("float64", "float32"),
    "int8": ("int8",),
}
# Integer and boolean operators (indexing, comparisons, masks) are memory-bound: no arithmetic peak bounds them.
# int8 uses the profile's int8 peak when it has one (int8 matrix products run on tensor cores).
MEMORY_BOUND = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"})


@dataclass(frozen=True)
class DeviceProfile:
    """What a device's data sheet says, for `roofline_ns` (module docstring).

    Attributes
    ----------
    name : str
        The profile's name (``h100-sxm``).
    peak_flops : dict of str to float
        FLOP/s by dtype name: ``float32`` (without tensor cores), ``float16``, ``float64``, and optionally
        ``bfloat16``, ``tfloat32`` and ``int8`` (tensor cores, dense).
    memory_bandwidth : float
        Bytes/s of device memory.
    launch_s : float
        Fixed cost of one operator, s: a kernel launch and the framework's dispatch.
    host_to_device, device_to_host : float
        Bytes/s over the host link, each direction (for activation offloading).
    source : str
        Where the figures come from, one line.
    efficiency : float
        The fraction of peak FLOP/s and bandwidth an operator reaches, in (0, 1]; 1.0 (the roofline itself)
        unless a measurement says otherwise.
    memory_bytes : int or None
        Device memory, bytes (None: not given).
    """

    name: str
    peak_flops: dict[str, float]
    memory_bandwidth: float
    launch_s: float
    host_to_device: float
    device_to_host: float
    source: str
    efficiency: float = 1.0
    memory_bytes: int | None = None
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def peak(self, dtype: str) -> float | None:
        """The FLOP/s ``dtype``'s operators run at: its own peak, else the next of `FALLBACK` the profile has.

        Parameters
        ----------
        dtype : str
            A dtype name as PyTorch spells it without ``torch.`` (``bfloat16``), or ``tfloat32``.

        Returns
        -------
        float or None
            None for an integer or boolean dtype without a peak of its own (memory-bound).
        """
        for name in FALLBACK.get(dtype, () if dtype in MEMORY_BOUND else ("float32",)):
            if name in self.peak_flops:
                return self.peak_flops[name]
        return None

    def transfer(self) -> Transfer:
        """The host link as a graph records it, for durations in ns and memory in bytes: bytes per ns each
        way, and ``launch_s`` (in ns) as each copy's latency (an asynchronous copy is launched like a kernel).

        Returns
        -------
        Transfer
        """
        latency = self.launch_s * 1e9
        return Transfer(Link(self.device_to_host / 1e9, latency), Link(self.host_to_device / 1e9, latency),
                        f"device profile {self.name}")

    def as_dict(self) -> dict[str, Any]:
        """The profile as its file writes it (and a graph's cost record keeps it).

        Returns
        -------
        dict
            ``name``, ``source``, ``peak_flops``, ``memory_bandwidth``, ``launch_s``, ``host_to_device``,
            ``device_to_host``, ``efficiency`` and, when given, ``memory_bytes``.
        """
        out: dict[str, Any] = {
            "name": self.name, "source": self.source, "peak_flops": dict(self.peak_flops),
            "memory_bandwidth": self.memory_bandwidth, "launch_s": self.launch_s,
            "host_to_device": self.host_to_device, "device_to_host": self.device_to_host,
            "efficiency": self.efficiency,
        }
        if self.memory_bytes is not None:
            out["memory_bytes"] = self.memory_bytes
        return out


def roofline_ns(flops: int, bytes_moved: int, dtype: str, profile: DeviceProfile) -> int:
    """The roofline time of one operator on ``profile``'s device, ns (module docstring).

    ``launch_s + max(flops / peak(dtype), bytes_moved / memory_bandwidth)``, both
    rates scaled by the profile's ``efficiency``. A dtype the profile has no
    peak for falls back in the order of `FALLBACK`: bfloat16 -> float16 ->
    float32, float16 -> bfloat16 -> float32, tfloat32 -> float32, float64 ->
    float32, any other floating dtype -> float32. Integer and boolean
    operators are memory-bound (only bytes count), except int8 on a profile
    with an ``int8`` peak.

    Parameters
    ----------
    flops : int
        Floating-point (or integer) operations, >= 0.
    bytes_moved : int
        Bytes read and written in device memory, >= 0.
    dtype : str
        The dtype the operator computes in (`DeviceProfile.peak`).
    profile : DeviceProfile
        The device.

    Returns
    -------
    int
        ns, rounded to the nearest, at least 1.

    Raises
    ------
    ValueError
        Negative ``flops`` or ``bytes_moved``.
    """
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops and bytes must be >= 0, not {flops} and {bytes_moved}")
    peak = profile.peak(dtype)
    compute = flops / (profile.efficiency * peak) if peak else 0.0
    memory = bytes_moved / (profile.efficiency * profile.memory_bandwidth)
    return max(1, round((profile.launch_s + max(compute, memory)) * 1e9))


# ---------------------------------------------------------------------- files


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that also reads ``67e12`` as a number (YAML 1.2 does; YAML 1.1, which PyYAML reads,
    takes a float without a dot or an exponent sign for text, and a data sheet's figures are written so)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def shipped_profiles() -> list[str]:
    """The names of the profiles shipped with the package, in file order (aliases not included).

    Returns
    -------
    list of str
    """
    return list(_shipped())


def shipped_aliases() -> dict[str, str]:
    """Other names of the shipped profiles (``h100`` -> ``h100-sxm``).

    Returns
    -------
    dict of str to str
    """
    return {alias: name for name, profile in _shipped().items() for alias in profile.aliases}


def load_device_profile(name_or_path: str | Path) -> DeviceProfile:
    """A shipped profile by name or alias (any case), or the profile in a YAML or JSON file of the user's own.

    A file holds one profile: ``peak_flops`` (``float32``, ``float16`` and
    ``float64`` required; ``bfloat16``, ``tfloat32``, ``int8`` optional),
    ``memory_bandwidth``, ``launch_s``, ``host_to_device``, ``device_to_host``
    and ``source``; optionally ``name`` (default: the file's name without its
    extension), ``efficiency`` and ``memory_bytes`` (module docstring, and
    docs/design.md section 3).

    Parameters
    ----------
    name_or_path : str or Path
        A name of `shipped_profiles` or `shipped_aliases`, or a file's path.

    Returns
    -------
    DeviceProfile

    Raises
    ------
    DeviceProfileError
        An unknown name that is no file either, or a file that cannot be read, is not YAML, or breaks the
        schema (one sentence naming the file and the field).
    """
    text = str(name_or_path)
    shipped = _shipped()
    key = shipped_aliases().get(text.lower(), text.lower())
    if key in shipped and not isinstance(name_or_path, Path):  # a file of that name: give it as ./h100
        return shipped[key]
    if not Path(text).exists():
        raise DeviceProfileError(
            f"'{printable(text)}' is neither a shipped device profile ({', '.join(_names_and_aliases())}) nor a "
            "file; give one of those names, or the path of a YAML file of your own (docs/design.md section 3)")
    data = _parse(read_regular(text, DeviceProfileError, limit=MAX_PROFILE_BYTES, hint="").decode("utf-8", "replace"),
                  text)
    return _profile(data, text, default_name=Path(text).stem)


@cache
def _shipped() -> dict[str, DeviceProfile]:
    """The shipped profiles by name (read once)."""
    where = f"remat_bench/{SHIPPED}"
    data = _parse(resources.files("remat_bench").joinpath(SHIPPED).read_text(encoding="utf-8"), where)
    profiles = {}
    for name, entry in data["profiles"].items():
        entry = dict(entry)
        aliases = tuple(entry.pop("aliases", ()))
        profile = _profile({"name": name, **entry}, f"{where}, profile {name}", default_name=name)
        profiles[name] = replace(profile, aliases=aliases)
    return profiles


def _names_and_aliases() -> list[str]:
    aliases = shipped_aliases()
    return [name + "".join(f" ({a})" for a, n in aliases.items() if n == name) for name in _shipped()]


def _parse(text: str, source: str) -> Any:
    """The YAML (or JSON) document in ``text``; one sentence with its line when it is not YAML."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: plain values only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        raise DeviceProfileError(f"{source}: not valid YAML{where}: {problem}") from None


def _profile(data: Any, source: str, default_name: str) -> DeviceProfile:
    """The profile ``data`` describes, checked against the schema; one sentence naming the field when not."""
    validator = jsonschema.Draft202012Validator(schema("device_profile"))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise DeviceProfileError(f"{source}: {_describe(error, data)}")
    numbers = {**{f"peak_flops.{k}": v for k, v in data["peak_flops"].items()},
               **{k: v for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}}
    for where, value in numbers.items():
        if not math.isfinite(value):
            raise DeviceProfileError(f"{source}: field {where} is {value}; it must be a finite number")
    memory = data.get("memory_bytes")
    return DeviceProfile(
        name=str(data.get("name", default_name)),
        peak_flops={k: float(v) for k, v in data["peak_flops"].items()},
        memory_bandwidth=float(data["memory_bandwidth"]), launch_s=float(data["launch_s"]),
        host_to_device=float(data["host_to_device"]), device_to_host=float(data["device_to_host"]),
        source=str(data["source"]), efficiency=float(data.get("efficiency", 1.0)),
        memory_bytes=int(memory) if memory is not None else None,
    )


def _describe(error: jsonschema.ValidationError, data: Any) -> str:
    """One sentence for a schema error in a profile (the generic wording, with the bounds said plainly)."""
    path = ".".join(str(p) for p in error.absolute_path)
    where = f"field {path}" if path else "the top level"
    if error.validator == "exclusiveMinimum":
        return f"{where} is {error.instance}; it must be greater than {error.validator_value}"
    if error.validator in ("minimum", "maximum"):
        bound = "at least" if error.validator == "minimum" else "at most"
        return f"{where} is {error.instance}; it must be {bound} {error.validator_value}"
    if error.validator == "type" and not path:
        return "a device profile must be a mapping of fields (name, peak_flops, memory_bandwidth, ...)"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = ", ".join(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"{where} has an unknown field '{extra[0] if extra else '?'}'; its fields are {known}"
    return describe_schema_error(error, data, "node")

