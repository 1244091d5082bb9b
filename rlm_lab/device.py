"""Every CUDA-specific decision of rlm-lab in one place, as small functions a CPU-only test can check.

The GPU path runs rarely (a GPU is lent now and then, for minutes), so the branches that only a GPU takes
are kept here, each a few lines, and unit-tested on CPU by standing in for ``torch.cuda``
(``tests/test_device.py``): which device a run uses, which ``torch.distributed`` backend, whether bf16
mixed precision is on, how peak memory is read, and what a GPU's profile is called.

- Device choice: ``$RLM_DEVICE`` (``cpu`` / ``cuda``) wins, else CUDA when torch sees a GPU.
- Backend: NCCL for CUDA tensors, gloo for CPU ones (https://pytorch.org/docs/stable/distributed.html#backends).
- bf16: only on a CUDA device that supports it (``torch.cuda.is_bf16_supported``); on CPU autocast to bf16 is
  several times slower than fp32 on AVX2 machines without AMX, so a CPU run keeps fp32 even when a preset asks.
- Peak memory: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``
  (https://pytorch.org/docs/stable/generated/torch.cuda.max_memory_allocated.html); on CPU the process's
  high-water mark is read by the tracer instead, so this returns ``None`` there.
- This machine's CPU model (:func:`cpu_name`), the one door through which the package reads it; with
  ``$RLM_FAKE_MACHINE=1`` it is :data:`FAKE_CPU`, a model no committed profile names, so that a test run (CI
  runs one) shows that nothing but what the reader runs depends on which CPU builds the book.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from .errors import RlmLabError

DEVICES = ("cpu", "cuda")
ENV_VAR = "RLM_DEVICE"
FAKE_ENV = "RLM_FAKE_MACHINE"  # "1": this machine's CPU model and host name are faked to ones nobody has
FAKE_CPU = "Imaginary Test CPU 0000 (faked by RLM_FAKE_MACHINE)"
FAKE_HOST = "faked-host"


def faked() -> bool:
    """True when ``$RLM_FAKE_MACHINE`` asks for a machine unknown to every committed profile and record."""
    return os.environ.get(FAKE_ENV, "").strip() not in ("", "0")


def _torch():
    import torch

    return torch


def pick_device(requested: str | None = None) -> str:
    """``requested`` (or ``$RLM_DEVICE``) if given, else ``cuda`` when a GPU is visible, else ``cpu``.

    Asking for ``cuda`` where torch sees none is an error, not a silent fall-back to the CPU."""
    want = requested or os.environ.get(ENV_VAR) or None
    if want is not None and want not in DEVICES:
        raise RlmLabError(f"device {want!r} is not one of {', '.join(DEVICES)}")
    available = _torch().cuda.is_available()
    if want == "cuda" and not available:
        raise RlmLabError("device cuda asked for, but torch sees no CUDA device (a CPU build of torch, or no GPU)")
    return want or ("cuda" if available else "cpu")


def dist_backend(device: str) -> str:
    """The ``torch.distributed`` backend for tensors on ``device``."""
    if device not in DEVICES:
        raise RlmLabError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    return "nccl" if device == "cuda" else "gloo"


def use_bf16(requested: bool, device: str) -> bool:
    """Whether a run that asks for bf16 gets it: on CUDA with bf16 support only."""
    if not requested or device != "cuda":
        return False
    cuda = _torch().cuda
    return bool(cuda.is_available() and cuda.is_bf16_supported())


def precision_name(requested_bf16: bool, device: str) -> str:
    """The cost model's precision label for such a run: ``bf16-mixed`` or ``fp32``."""
    return "bf16-mixed" if use_bf16(requested_bf16, device) else "fp32"


def synchronize(device: str) -> None:
    """Wait for the queued kernels of ``device`` (CUDA launches are asynchronous; a timer must not stop before
    they finish). A no-op on CPU."""
    if device == "cuda":
        _torch().cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    """Start a new peak-memory window on ``device`` (a no-op on CPU)."""
    if device == "cuda":
        cuda = _torch().cuda
        cuda.synchronize()
        cuda.reset_peak_memory_stats()


def peak_memory_bytes(device: str) -> int | None:
    """Peak bytes allocated by tensors on ``device`` since the last reset; ``None`` on CPU (not measured here)."""
    if device != "cuda":
        return None
    cuda = _torch().cuda
    cuda.synchronize()
    return int(cuda.max_memory_allocated())


def gpu_slug(name: str) -> str:
    """A file-name-safe profile name from a GPU's name: ``NVIDIA H200`` -> ``nvidia-h200``."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise RlmLabError(f"GPU name {name!r} gives an empty profile name")
    return slug


def cpu_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``'s model name), :data:`FAKE_CPU` under ``$RLM_FAKE_MACHINE``."""
    if faked():
        return FAKE_CPU
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass

    return platform.processor() or platform.machine()


def default_name(device: str) -> str:
    """A profile name from the hardware: cpu-<cores>core-<model words>, or the GPU's name."""
    if device == "cuda":
        import torch

        return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-") + "-calibrated"
    words = [w for w in re.split(r"[^a-z0-9]+", cpu_name().lower())
             if w and w not in {"amd", "intel", "r", "tm", "cpu", "processor", "core", "with", "radeon", "graphics"}]
    return f"cpu-{os.cpu_count()}core-{'-'.join(words[:2]) or 'unknown'}"


def gpu_profile(known) -> str:
    """The hardware profile a prediction on this machine's GPU uses: a calibrated profile of this GPU when
    one was written (its name in ``known``), else its datasheet's; ``h100-sxm`` when torch sees no GPU."""
    torch = _torch()
    if not torch.cuda.is_available():
        return "h100-sxm"
    if default_name("cuda") in known:
        return default_name("cuda")
    name = torch.cuda.get_device_name(0)
    prof = datasheet_for(name)
    if prof is None:
        raise RlmLabError(f"no hardware profile for GPU {name.lower()!r}; run `rlm-lab calibrate --device cuda` "
                          "or set RLM_GPU_PROFILE to a profile name or path")
    return prof


def datasheet_for(gpu_name: str) -> str | None:
    """The datasheet profile of a GPU by the name CUDA reports (``NVIDIA H200`` -> ``h200``), None for one without
    a datasheet profile. Checked in this order, so that ``h200`` is not read as ``h20``."""
    name = gpu_name.lower()
    for key, prof in (("h200", "h200"), ("h20", "h20"), ("h100", "h100-sxm"), ("h800", "h800"), ("b200", "b200"),
                      ("a100", "a100-80gb"), ("l4", "l4"), ("t4", "t4")):
        if key in name:
            return prof
    return None


def device_summary(device: str) -> dict:
    """What a record says about the device a run used."""
    torch = _torch()
    out = {"device": device, "torch": torch.__version__}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), cuda=torch.version.cuda,
                   memory_bytes=int(props.total_memory), bf16=bool(torch.cuda.is_bf16_supported()))
    else:
        out.update(threads=torch.get_num_threads())
    return out
