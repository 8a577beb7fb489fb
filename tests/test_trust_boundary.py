"""The trust boundary, attacked as a client would: every check of `maestro reliability`'s trust suite runs here
against a real `maestro serve` subprocess on loopback (its RSS read from /proc), plus the CLI and start-up refusals
that only a subprocess shows. The Agent Server graph is attacked over the SDK in tests/test_langgraph_server.py."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from servers import EXAMPLES, ROOT, data_url, free_port, maestro_serve, server_env

from maestro_graph.operations.reliability.suite import fault_registry
from maestro_graph.operations.reliability.target import PlantedPickle, Target
from maestro_graph.operations.reliability.trust import TRUST_CHECKS

QR_QUESTION = "What text does the QR code encode?"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust")
    registry_file = fault_registry(folder, None)
    args = ["--registry", str(registry_file), "--workers", "2", "--timeout-s", "60"]
    with maestro_serve(args, folder / "serve.log") as (proc, url):
        yield Target(url, proc.pid, folder, data_url(EXAMPLES / "qrcode.png"), registry_file)


HEAVY_CHECKS = {"image_memory", "cap_before_decoding"}
"""Checks that decode eight 40-megapixel images (20 to 35 s each on two busy cores): slow, like test_traffic's
concurrent images at the pixel cap."""


@pytest.mark.parametrize("check", [pytest.param(c, id=c.__name__, marks=pytest.mark.slow if c.__name__ in HEAVY_CHECKS
                                                else ()) for c in TRUST_CHECKS])
def test_attack_against_maestro_serve(check, target):
    case = check(target)
    assert case.ok, f"{case.attack}: {case.must} did not hold: {case.detail}"


def test_a_pickle_through_maestro_ask_never_runs(tmp_path):
    """`maestro ask --policy neural:FILE` is the operator's, but a checkpoint is data: the loader reads no pickle."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(PlantedPickle(marker)))
    maestro = Path(sys.executable).parent / "maestro"
    run = subprocess.run([str(maestro), "ask", QR_QUESTION, "-i", str(EXAMPLES / "qrcode.png"), "--policy",
                          f"neural:{evil}"], cwd=ROOT, env=server_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "evil.pt" in run.stderr + run.stdout
    assert not marker.exists()


@pytest.mark.parametrize("args, message", [
    (["--api-key-env", "MAESTRO_TEST_UNSET_KEY"], "MAESTRO_TEST_UNSET_KEY: that environment variable is unset"),
    (["--host", "0.0.0.0"], "--host 0.0.0.0 listens beyond loopback"),
])
def test_serve_refuses_to_start_unauthenticated_by_accident(args, message, tmp_path):
    """Refused before anything loads: a registry file that would not load is never read."""
    maestro = Path(sys.executable).parent / "maestro"
    env = {k: v for k, v in server_env().items() if k not in ("MAESTRO_API_KEY", "MAESTRO_TEST_UNSET_KEY")}
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: [")
    run = subprocess.run([str(maestro), "serve", "--port", str(free_port()), "--registry", str(broken), *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    output = " ".join(run.stderr.split())  # rich wraps long lines
    assert run.returncode == 2 and message in output and "--insecure" in output
    assert "broken.yaml" not in output and "Traceback" not in run.stderr


def test_insecure_is_an_explicit_choice(tmp_path):
    os.environ.pop("MAESTRO_TEST_UNSET_KEY", None)
    with maestro_serve(["--api-key-env", "MAESTRO_TEST_UNSET_KEY", "--insecure"], tmp_path / "serve.log") as (_, url):
        assert httpx.get(f"{url}/v1/models").status_code == 200
    assert "warning" in (tmp_path / "serve.log").read_text()
