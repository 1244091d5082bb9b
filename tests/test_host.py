"""rlm_lab.host: the one load-average reader and the one free-port helper, and that nothing else reads them."""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest

from rlm_lab import host

ROOT = Path(__file__).resolve().parents[1]


def test_load_average_rounds_only_when_asked(monkeypatch):
    monkeypatch.setattr(host.os, "getloadavg", lambda: (1.23456, 0.5, 2.0))
    assert host.load_average() == [1.23456, 0.5, 2.0]
    assert host.load_average(2) == [1.23, 0.5, 2.0]


def test_load_average_is_none_where_the_os_has_none(monkeypatch):
    def unavailable():
        raise OSError("getloadavg unavailable")

    monkeypatch.setattr(host.os, "getloadavg", unavailable)
    assert host.load_average() is None and host.load_average(2) is None


def test_machine_load_per_core():
    assert host.machine_load(cores=4, loadavg=lambda: (2.0, 1.0, 0.5)) == {
        "loadavg": [2.0, 1.0, 0.5], "cores": 4, "per_core": 0.5}


def test_free_port_can_be_bound_on_loopback():
    port = host.free_port()
    assert 1024 <= port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))  # free: nothing holds it after the helper returns


@pytest.mark.parametrize("what", ["getloadavg", "free_port"])
def test_no_second_copy_outside_host(what):
    """No module but rlm_lab/host.py calls ``os.getloadavg()`` or defines a load-average or free-port
    function (passing ``os.getloadavg`` itself as an injectable default is no call)."""
    found = []
    for p in sorted((ROOT / "rlm_lab").rglob("*.py")):
        if p.name == "host.py" and p.parent.name == "rlm_lab":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if what == "getloadavg" and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "getloadavg":
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
            if what == "free_port" and isinstance(node, ast.FunctionDef) and node.name in {"free_port", "_free_port",
                                                                                            "_loadavg", "loadavg"}:
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not found, f"use rlm_lab.host instead: {found}"
