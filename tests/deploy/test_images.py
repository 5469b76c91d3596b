"""docker/*.Dockerfile: hadolint-clean, parsed, and installing exactly as the Makefile does."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from . import k8s

DOCKER = k8s.REPO / "docker"
IMAGES = ("router.Dockerfile", "cpu-pool.Dockerfile")


def parse(name: str):
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(path=str(DOCKER / name))
    return parser


def instructions(name: str, kind: str) -> list[str]:
    return [i["value"] for i in parse(name).structure if i["instruction"] == kind]


def run_commands(name: str) -> list[list[str]]:
    """Every shell command of every RUN, split on && and tokenized."""
    out = []
    for value in instructions(name, "RUN"):
        for part in value.split("&&"):
            out.append(shlex.split(part))
    return out


def makefile_recipe(target_prefix: str) -> list[str]:
    """The recipe lines of the first Makefile rule whose target starts with target_prefix."""
    lines = (k8s.REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(target_prefix))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


@pytest.mark.parametrize("name", IMAGES)
def test_hadolint_finds_nothing(name: str) -> None:
    proc = subprocess.run(
        [str(k8s.HADOLINT), "--no-color", "--format", "json", str(DOCKER / name)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert json.loads(proc.stdout or "[]") == [], proc.stdout
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", IMAGES)
def test_non_root_with_healthcheck_on_slim_python(name: str) -> None:
    df = parse(name)
    assert df.baseimage == "python:3.11-slim-bookworm"
    (user,) = instructions(name, "USER")
    assert user == "10001:10001"
    (health,) = instructions(name, "HEALTHCHECK")
    assert "/health" in health and "--start-period=" in health
    for src in (src for value in instructions(name, "COPY") for src in value.split()[:-1]):
        assert (k8s.REPO / src).exists(), f"{name}: COPY {src} does not exist"


def test_router_image_installs_the_project_like_the_readme() -> None:
    cmds = run_commands("router.Dockerfile")
    assert ["pip", "install", "-e", "."] in cmds
    flat = " ".join(" ".join(c) for c in cmds)
    assert "torch" not in flat and "sglang" not in flat  # slim: the router only tokenizes
    assert instructions("router.Dockerfile", "ENTRYPOINT") == ['["specgate"]']
    assert instructions("router.Dockerfile", "CMD") == ['["router", "--config", "/etc/specgate/config.yaml"]']
    assert instructions("router.Dockerfile", "EXPOSE") == ["8000"]
    # The chart runs the image with the same arguments and port.
    dep = k8s.one(k8s.render(), "Deployment", "sg-specgate-router")
    c = k8s.container(dep["spec"]["template"], "router")
    assert c["args"] == ["router", "--config", "/etc/specgate/config.yaml"]
    assert c["ports"][0]["containerPort"] == 8000
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001


def test_cpu_pool_image_runs_the_makefile_install_steps() -> None:
    venv = "/opt/specgate/.venv"
    cmds = run_commands("cpu-pool.Dockerfile")

    def from_makefile(line: str) -> list[str]:
        line = line.replace("$(BIN)", f"{venv}/bin").replace("$(VENV)", venv).replace("$(PY)", "python3")
        return shlex.split(line)

    venv_steps = [from_makefile(line) for line in makefile_recipe("$(BASE_STAMP):") if "touch" not in line]
    engine_steps = [from_makefile(line) for line in makefile_recipe("$(CPU_STAMP):") if "touch" not in line]
    assert venv_steps and engine_steps
    for step in venv_steps + engine_steps:
        assert step in cmds, f"Makefile step {shlex.join(step)} missing from cpu-pool.Dockerfile"
    assert ["bash", "serving/cpu/install.sh", venv] in cmds
    env = parse("cpu-pool.Dockerfile").envs
    assert env["PATH"].startswith(f"{venv}/bin:")  # so the chart's `python3 -m sglang...` is the venv's
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert re.fullmatch(r"30000", instructions("cpu-pool.Dockerfile", "EXPOSE")[0])
    # The cpu-dev overlay and value set use this image with the chart's python3 command.
    objects = k8s.render(k8s.values_file("cpu-dev-values.yaml"))
    c = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-pool-spec")["spec"]["template"], "sglang")
    assert c["image"] == "specgate/cpu-pool:0.1.0" and c["command"][0] == "python3"
