"""Device memory capacity: what the present device reports, else the vendor's specification.

``device_capacity(target, backend, devices)`` returns ``(bytes, source, label)``:

* a device that is here and reports ``memory_stats()["bytes_limit"]`` (GPU, TPU) -> ``measured``;
* a deviceless TPU topology or GPU target -> the vendor figure below, ``spec``;
* anything else (the CPU: JAX reports no limit; an unknown chip) -> ``(None, None, note)``.

Spec figures are per chip (TPU) or per GPU, as the vendors publish them. Vendors write "GB" for
HBM sizes that are binary (a v5e chip holds 16 GiB; an "80GB" H100 has 80 GiB of HBM3, of which
a little less is usable); the table uses the binary figure, so a verdict near the limit should
be confirmed on the device (``memory_stats()`` there is the measured limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SPEC_CAPACITY", "Capacity", "device_capacity", "spec_capacity"]

_GIB = 1024**3


@dataclass(frozen=True)
class Capacity:
    """Memory of one chip / GPU from its public specification."""

    bytes: int
    memory: str  # kind of memory and how the vendor writes its size
    reference: str  # where the figure is published


SPEC_CAPACITY: dict[str, Capacity] = {
    # Google Cloud TPU system architecture pages, "HBM capacity per chip".
    "tpu v4": Capacity(32 * _GIB, "32 GiB HBM2", "https://cloud.google.com/tpu/docs/v4"),
    "tpu v5e": Capacity(16 * _GIB, "16 GB HBM2", "https://cloud.google.com/tpu/docs/v5e"),
    "tpu v5p": Capacity(95 * _GIB, "95 GB HBM2e", "https://cloud.google.com/tpu/docs/v5p"),
    "tpu v6e": Capacity(32 * _GIB, "32 GB HBM", "https://cloud.google.com/tpu/docs/v6e"),
    # NVIDIA data sheets (one SXM model per generation, as nbcompile.targets.GPU_TARGETS).
    "gpu v100": Capacity(
        16 * _GIB,
        "16 GB HBM2 (V100 SXM2 16GB)",
        "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
    ),
    "gpu a100": Capacity(
        80 * _GIB,
        "80 GB HBM2e (A100 SXM4 80GB)",
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    ),
    "gpu h100": Capacity(
        80 * _GIB, "80 GB HBM3 (H100 SXM)", "https://www.nvidia.com/en-us/data-center/h100/"
    ),
    "gpu h200": Capacity(
        141 * _GIB, "141 GB HBM3e (H200 SXM)", "https://www.nvidia.com/en-us/data-center/h200/"
    ),
    "gpu b200": Capacity(
        180 * _GIB,
        "180 GB HBM3e (B200 in DGX B200: 1,440 GB per 8 GPUs)",
        "https://www.nvidia.com/en-us/data-center/dgx-b200/",
    ),
}

# device_kind strings JAX reports -> table keys (TPU v5e reports "TPU v5 lite").
_KINDS = (
    ("v5 lite", "tpu v5e"),
    ("v5e", "tpu v5e"),
    ("v5p", "tpu v5p"),
    ("v6 lite", "tpu v6e"),
    ("v6e", "tpu v6e"),
    ("v4", "tpu v4"),
    ("v100", "gpu v100"),
    ("a100", "gpu a100"),
    ("h100", "gpu h100"),
    ("h200", "gpu h200"),
    ("b200", "gpu b200"),
)


def spec_capacity(name: str | None) -> tuple[str, Capacity] | None:
    """The table entry for a topology (``v5e:2x2``), GPU target (``h100``) or device kind."""
    if not name:
        return None
    key = name.lower().split(":", 1)[0]
    for tag, entry in _KINDS:
        if tag in key:
            return entry, SPEC_CAPACITY[entry]
    return None


def _measured(devices: list[Any]) -> int | None:
    for device in devices[:1]:
        try:
            stats = device.memory_stats()
        except (RuntimeError, NotImplementedError, AttributeError):
            return None  # compile-only topology devices cannot be asked
        if stats and stats.get("bytes_limit"):
            return int(stats["bytes_limit"])
    return None


def device_capacity(
    target: Any | None = None, backend: str | None = None, devices: list[Any] | None = None
) -> tuple[int | None, str | None, str | None]:
    """``(bytes, "measured" | "spec", label)`` of one device of the compile's target, or
    ``(None, None, why)`` where nothing is known."""
    present = target is None or bool(getattr(target, "present", False))
    if (getattr(target, "platform", None) or backend) == "cpu":
        return None, None, "the CPU reports no memory limit to JAX"
    devs = list(devices if devices is not None else getattr(target, "devices", None) or [])
    if present and not devs and backend is not None:
        import jax

        try:
            devs = list(jax.devices("gpu" if backend in ("cuda", "rocm") else backend))
        except RuntimeError:
            devs = []
    if present and devs:
        measured = _measured(devs)
        if measured is not None:
            kind = getattr(devs[0], "device_kind", "device")
            return measured, "measured", f"{kind}: memory_stats()['bytes_limit']"
    names = [getattr(target, "topology", None), getattr(target, "gpu_target", None)]
    names += [getattr(d, "device_kind", None) for d in devs[:1]]
    for name in names:
        found = spec_capacity(name)
        if found is not None:
            key, cap = found
            chip = "per chip" if key.startswith("tpu") else "per GPU"
            title = f"TPU {key[4:]}" if key.startswith("tpu") else key[4:].upper()
            return cap.bytes, "spec", f"{title} {chip}: {cap.memory} ({cap.reference})"
    if present and devs:
        return None, None, "this device reports no memory limit"
    return None, None, "no capacity known for this target"
