"""The CUDA-only branches of rlm_lab.device, checked on a CPU machine by standing in for torch.cuda."""

import pytest
import torch

from rlm_lab import device as dev
from rlm_lab.errors import RlmLabError


class FakeCuda:
    """Records the calls rlm_lab.device makes, answers like a GPU with ``bf16`` support as given."""

    def __init__(self, available=True, bf16=True, peak=123_456_789):
        self.available, self.bf16, self.peak, self.calls = available, bf16, peak, []

    def is_available(self):
        return self.available

    def is_bf16_supported(self):
        return self.bf16

    def synchronize(self, *a):
        self.calls.append("synchronize")

    def reset_peak_memory_stats(self, *a):
        self.calls.append("reset")

    def max_memory_allocated(self, *a):
        self.calls.append("max")
        return self.peak


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(torch, "cuda", fake)
    monkeypatch.delenv(dev.ENV_VAR, raising=False)
    return fake


def test_pick_device_on_cpu_machine(monkeypatch):
    monkeypatch.delenv(dev.ENV_VAR, raising=False)
    assert dev.pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert dev.pick_device("cpu") == "cpu"


def test_pick_device_prefers_gpu_and_honours_override(gpu, monkeypatch):
    assert dev.pick_device() == "cuda"
    monkeypatch.setenv(dev.ENV_VAR, "cpu")
    assert dev.pick_device() == "cpu"  # the environment can keep a GPU machine's run on the CPU
    assert dev.pick_device("cuda") == "cuda"  # an explicit argument beats the environment


def test_asking_for_cuda_without_one_is_an_error(gpu):
    gpu.available = False
    with pytest.raises(RlmLabError, match="no CUDA device"):
        dev.pick_device("cuda")
    with pytest.raises(RlmLabError, match="not one of"):
        dev.pick_device("tpu")


def test_backend_follows_device():
    assert dev.dist_backend("cuda") == "nccl"
    assert dev.dist_backend("cpu") == "gloo"
    with pytest.raises(RlmLabError):
        dev.dist_backend("mps")


@pytest.mark.parametrize("requested,device,supported,expected", [
    (True, "cuda", True, True),
    (True, "cuda", False, False),   # an older GPU (T4) has no bf16: fp32, not a crash
    (True, "cpu", True, False),     # never bf16 autocast on the CPU, even if a preset asks
    (False, "cuda", True, False),
])
def test_bf16_only_where_it_runs(gpu, requested, device, supported, expected):
    gpu.bf16 = supported
    assert dev.use_bf16(requested, device) is expected
    assert dev.precision_name(requested, device) == ("bf16-mixed" if expected else "fp32")


def test_peak_memory_reads_cuda_after_a_sync(gpu):
    dev.reset_peak_memory("cuda")
    assert gpu.calls == ["synchronize", "reset"]
    assert dev.peak_memory_bytes("cuda") == 123_456_789
    assert gpu.calls[-2:] == ["synchronize", "max"]  # the read waits for queued kernels first
    assert dev.peak_memory_bytes("cpu") is None
    dev.reset_peak_memory("cpu")
    assert gpu.calls.count("reset") == 1  # the CPU path never touches torch.cuda


@pytest.mark.parametrize("name,slug", [("NVIDIA H200", "nvidia-h200"), ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
                                       ("Tesla T4", "tesla-t4")])
def test_gpu_slug(name, slug):
    assert dev.gpu_slug(name) == slug


def test_gpu_slug_refuses_empty():
    with pytest.raises(RlmLabError):
        dev.gpu_slug("  ")


def test_synchronize_waits_on_cuda_only(gpu):
    dev.synchronize("cpu")
    assert gpu.calls == []
    dev.synchronize("cuda")
    assert gpu.calls == ["synchronize"]


@pytest.mark.parametrize("name, prof", [("NVIDIA H200", "h200"), ("NVIDIA H20", "h20"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
                                        ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("Tesla T4", "t4"), ("NVIDIA RTX 3090", None)])
def test_datasheet_for_reads_the_cuda_name_and_never_takes_an_h200_for_an_h20(name, prof):
    from rlm_lab.device import datasheet_for

    assert datasheet_for(name) == prof
