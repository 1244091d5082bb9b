"""environment.yml (conda/Colab users) must declare the same packages and pins as the pip files CI uses.

No conda solve is possible offline, so this checks what can be checked here: the YAML parses, every
conda spec parses as a conda MatchSpec (rattler), every pip spec as a PEP 508 requirement, and the
names and version specifiers agree with requirements.txt + requirements-test.txt.
"""

from pathlib import Path

import pytest
import rattler
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PIP_FILES = ("requirements.txt", "requirements-test.txt")
CONDA_ONLY = {"python", "pip"}  # the interpreter and installer themselves, not packages we pin


def pip_requirements() -> dict[str, Requirement]:
    reqs = {}
    for name in PIP_FILES:
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                req = Requirement(line)
                reqs[canonicalize_name(req.name)] = req
    return reqs


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def env_specs() -> dict[str, SpecifierSet]:
    """name -> version specifier for every package environment.yml declares (conda and pip sections)."""
    specs = {}
    for dep in environment()["dependencies"]:
        if isinstance(dep, dict):
            for line in dep["pip"]:
                req = Requirement(line)
                specs[canonicalize_name(req.name)] = req.specifier
        else:
            match = rattler.MatchSpec(dep)  # raises on a malformed conda spec
            name = match.name.normalized
            if name not in CONDA_ONLY:
                # Written in the shared syntax (==, >=, <) so pip and conda read the same bounds.
                specs[canonicalize_name(name)] = SpecifierSet(dep[len(name):].strip())
    return specs


def test_environment_yml_parses():
    env = environment()
    assert env["name"] == "rlm-lab"
    assert env["channels"] == ["conda-forge"]
    deps = env["dependencies"]
    assert "pip" in deps, "a pip: section needs pip itself in the conda dependencies"
    pip_sections = [d for d in deps if isinstance(d, dict)]
    assert len(pip_sections) == 1 and set(pip_sections[0]) == {"pip"}


def test_same_package_names_as_pip_files():
    pip_names, env_names = set(pip_requirements()), set(env_specs())
    assert pip_names - env_names == set(), "in requirements*.txt but not in environment.yml"
    assert env_names - pip_names == set(), "in environment.yml but not in requirements*.txt"


@pytest.mark.parametrize("name", sorted(pip_requirements()))
def test_same_version_bounds(name):
    assert env_specs()[name] == pip_requirements()[name].specifier, (
        f"{name}: environment.yml and requirements*.txt pin different versions")


def test_torch_stays_pinned_to_the_local_cpu_build():
    # A looser pin makes pip fetch a multi-GB CUDA build instead of the wheel on local disk.
    assert str(pip_requirements()["torch"].specifier) == "==2.13.0"
