"""The registry of published cluster measurements (rlm_lab.validate.published): every file loads, every URL is an
https URL of the source it names, the split is by source and was committed before the fit."""

import json
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from rlm_lab.errors import RlmLabError
from rlm_lab.validate.published import (DIRECTION_REFERENCE, PUBLISHED, RATIO_QUANTITIES, STEP_QUANTITIES,
                                        expand_response, load_published)
from rlm_lab.validate.published_predict import FIT_FILE, SPLIT_FILE, load_fit, split_sha256

ROOT = Path(__file__).resolve().parents[1]
BIB = (ROOT / "book" / "references.bib").read_text()

# Where each source's pages live, written here independently of sources.yaml: a URL must start with one of them.
SOURCE_HOSTS = {
    "verl-fully-async": ("https://verl.readthedocs.io/", "https://github.com/verl-project/verl/",
                         "https://github.com/volcengine/verl/"),
    "verl-one-step-off": ("https://verl.readthedocs.io/", "https://github.com/verl-project/verl/",
                          "https://github.com/volcengine/verl/"),
    "nemo-rl-perf": ("https://docs.nvidia.com/nemo/rl/", "https://github.com/NVIDIA-NeMo/RL/"),
    "areal-v03": ("https://github.com/inclusionAI/AReaL/",),
    "openrlhf-bench": ("https://github.com/OpenRLHF/OpenRLHF/",),
    "prime-rl-bench": ("https://github.com/PrimeIntellect-ai/prime-rl/",),
    "checkpoint-engine": ("https://github.com/MoonshotAI/checkpoint-engine/",),
    "slime-weight-sync": ("https://hebiao064.github.io/", "https://github.com/hebiao064/hebiao064.github.io/"),
    "rlinf-vs-verl": ("https://rlinf.readthedocs.io/", "https://github.com/RLinf/RLinf/"),
    "verl-checkpoint-engine-readme": ("https://github.com/verl-project/verl/",),
    "verl-delta-weight-sync": ("https://verl.readthedocs.io/", "https://github.com/verl-project/verl/"),
    "verl-sglang-one-step-off": ("https://github.com/verl-project/verl/", "https://github.com/volcengine/verl/"),
    "nemo-rl-v03-blog": ("https://nvidia-nemo.github.io/", "https://github.com/NVIDIA-NeMo/"),
    "miles-p2p-weight-transfer": ("https://miles.radixark.com/", "https://github.com/radixark/miles/"),
    "nemo-rl-v06-perf": ("https://docs.nvidia.com/nemo/rl/", "https://github.com/NVIDIA-NeMo/"),
    "nemo-rl-v04-perf": ("https://docs.nvidia.com/nemo/rl/", "https://github.com/NVIDIA-NeMo/"),
    "skyrl-megatron-backend": ("https://github.com/NovaSky-AI/SkyRL/", "https://skyrl.readthedocs.io/"),
    "nemo-rl-async-refit-blog": ("https://github.com/NVIDIA-NeMo/", "https://nvidia-nemo.github.io/"),
}


@pytest.fixture(scope="module")
def reg():
    return load_published()


def test_every_file_loads_and_the_registry_has_its_size(reg):
    files = sorted((PUBLISHED / "cases").glob("*.yaml"))
    assert len(reg.cases) == len(files) >= 20
    sources = {c.source for c in reg.cases.values()}
    assert len(sources) >= 8 and sources == set(reg.sources)       # no source without a case
    assert len({reg.sources[s].project for s in sources}) >= 7     # verl's two pages are one project
    for side in ("calibration", "validation"):
        assert reg.by_split(side)
    # both of the judged groups have validation cases
    val = reg.by_split("validation")
    assert sum(c.quantity in RATIO_QUANTITIES for c in val) >= 5
    assert sum(c.quantity in STEP_QUANTITIES for c in val) >= 3


def test_every_url_is_an_https_url_of_the_named_source(reg):
    assert set(reg.sources) == set(SOURCE_HOSTS)
    for sid, src in reg.sources.items():
        for url in (src.url, src.permalink):
            assert url.startswith(SOURCE_HOSTS[sid]), (sid, url)
            assert " " not in url and url.count("://") == 1
        assert f"{{{src.bib}," in BIB, (sid, src.bib)              # cited in the book's bibliography
        if "github.com" in src.permalink and "/blob/" in src.permalink:
            ref = src.permalink.split("/blob/")[1].split("/")[0]
            assert ref == "main" or len(ref) == 40, (sid, ref)       # a branch or a full commit hash


def test_the_split_is_by_source(reg):
    side_of = {}
    for c in reg.cases.values():
        assert side_of.setdefault(c.source, c.split) == c.split, c.id
    assert set(side_of.values()) == {"calibration", "validation"}
    assert {s for s, v in side_of.items() if v == "calibration"} == set(reg.split["calibration"])


def test_a_case_against_the_split_is_refused(tmp_path):
    folder = tmp_path / "published"
    shutil.copytree(PUBLISHED, folder)
    path = folder / "cases" / "nemo-rl-llama3.1-8b-onpolicy-step.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["split"] = "validation"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(RlmLabError, match=r"split 'validation' disagrees with split\.yaml.*nemo-rl-perf.*calibration"):
        load_published(folder)


def _first_commit_time(path: Path) -> datetime | None:
    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cI", "--", str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    lines = out.stdout.split()
    return datetime.fromisoformat(lines[-1]) if out.returncode == 0 and lines else None


def test_the_split_was_committed_before_the_fit_and_is_the_one_fitted_on(reg):
    fit = load_fit()
    if fit is None:
        pytest.skip("no fit committed yet")
    added = _first_commit_time(SPLIT_FILE)
    if added is None:
        pytest.skip("no git history here (the split's commit cannot be dated)")
    fitted = datetime.fromisoformat(fit["fitted_at"].replace("Z", "+00:00"))
    assert added < fitted, (added, fitted)
    assert fit["split_sha256"] == split_sha256()        # the split has not changed since the fit
    cal = {c.id for c in reg.by_split("calibration")}
    assert set(fit["cases"]) <= cal and set(fit["left_out"]) <= cal     # the fit read calibration cases only
    assert set(fit["cases"]) | set(fit["left_out"]) == cal


def test_reasoning_tail_is_the_assumed_lognormal():
    from rlm_lab.cost.workload import ResponseLengths

    cap = expand_response({"kind": "reasoning_tail", "max": 8000})
    assert cap == {"kind": "lognormal", "sigma": 0.8, "max": 8000, "min": 1, "median": 1000.0}
    m = expand_response({"kind": "reasoning_tail", "max": 4000, "mean": 900})
    xs = ResponseLengths(**m).sample(512)
    assert abs(sum(xs) / len(xs) - 900) < 5              # the clipped mean is the stated one
    assert expand_response({"kind": "fixed", "length": 7}) == {"kind": "fixed", "length": 7}
    with pytest.raises(RlmLabError, match="mean 5000 must be below its cap 4000"):
        expand_response({"kind": "reasoning_tail", "max": 4000, "mean": 5000})
    # a mean from another source names it: an https citation beside the mean, never alone
    url = "https://example.org/page (table 1)"
    assert expand_response({"kind": "reasoning_tail", "max": 4000, "mean": 900, "mean_from": url}) == m
    for bad in ({"kind": "reasoning_tail", "max": 4000, "mean_from": url},
                {"kind": "reasoning_tail", "max": 4000, "mean": 900, "mean_from": "a blog"}):
        with pytest.raises(RlmLabError, match="mean_from must be an https://"):
            expand_response(bad)


def test_a_mean_from_elsewhere_is_said_in_the_lengths_column(reg):
    said = {c.id: c.lengths for c in reg.cases.values()}
    assert said["verl-fully-async-7b-128gpu-speedup"] == "mean elsewhere"   # verl-recipe's AsyncFlow page
    assert said["nemo-rl-qwen3-32b-onpolicy-step"] == "mean stated"          # NeMo-RL's own G-Average Seq len
    assert said["verl-fully-async-30b-a3b-speedup"] == "cap only"


def test_direction_references_are_the_ratio_quantities():
    assert set(DIRECTION_REFERENCE) == set(RATIO_QUANTITIES)


def test_fit_file_is_valid_json_when_present():
    if FIT_FILE.is_file():
        json.loads(FIT_FILE.read_text())


def test_validate_published_loads_no_torch():
    import sys

    code = ("import sys\nfrom rlm_lab.validate.published import load_published\n"
            "from rlm_lab.validate.published_predict import predict_case\n"
            "import rlm_lab.validate.cli, rlm_lab.validate.published_report\n"
            "reg = load_published()\nprint(predict_case(reg.cases['prime-rl-qwen3-0.6b-16k-1xh100']).predicted > 0)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'ray') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["True", "[]"]
