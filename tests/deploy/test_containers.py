"""The Dockerfile and docker-compose.yml, checked statically (no Docker engine runs here).

Parsed, not run: every path they copy or mount exists and is in the build
context, the image installs the wheel and runs a console script the wheel
installs, and ports and service names agree with deploy/ and the settings.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from gateway.settings import Settings, unknown_environment
from tests.checkout import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
COMPOSE = REPO_ROOT / "docker-compose.yml"
PROMETHEUS_YML = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
DATASOURCE_YML = (
    REPO_ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
)
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "dashboards" / "agui-gateway.json"
KAFKA_SH = REPO_ROOT / "deploy" / "kafka.sh"
HTTP_PORT = Settings.model_fields["http_port"].default


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    assert not current, "a continuation line at the end of the Dockerfile"
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(DOCKERFILE.read_text()):
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def ignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(path).parts
    return any(
        fnmatch.fnmatch(path, p) or fnmatch.fnmatch(parts[0], p) or p.removeprefix("**/") in parts
        for p in patterns
    )


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_dockerfile_builds_a_wheel_and_installs_it_into_a_slim_image() -> None:
    build, runtime = stages()[0], stages()[-1]
    assert len(stages()) >= 2, "multi-stage"
    assert "slim" in DOCKERFILE.read_text().split("PYTHON_IMAGE=", 1)[1].split()[0]
    assert any(i == "RUN" and "pip wheel" in a for i, a in build)
    assert build[0][1].split()[-1] == "build"  # FROM ... AS build
    runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "pip install --no-index" in runs and "from=build" in runs and "/wheels" in runs
    assert not any(i == "COPY" and "--from" not in a for i, a in runtime), "sources in runtime"


@pytest.mark.parametrize("stage_index", [0, -1])
def test_every_path_the_dockerfile_copies_exists_in_the_build_context(stage_index: int) -> None:
    for instruction, args in stages()[stage_index]:
        if instruction != "COPY" or "--from" in args:
            continue
        *sources, _dest = args.split()
        for source in sources:
            assert (REPO_ROOT / source).exists(), source
            assert not ignored(source.rstrip("/")), f"{source} is excluded by .dockerignore"


def test_the_image_runs_as_a_non_root_user_with_a_healthcheck_on_healthz() -> None:
    runtime = stages()[-1]
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    entry = [n for n, (i, _) in enumerate(runtime) if i == "ENTRYPOINT"]
    user = [n for n, (i, _) in enumerate(runtime) if i == "USER"]
    assert user[-1] < entry[-1]
    health = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0] and "CMD" in health[0]
    assert f"'{HTTP_PORT}'" in health[0]
    exposed = [a for i, a in runtime if i == "EXPOSE"]
    assert exposed == [str(HTTP_PORT)]


def test_the_entrypoint_is_agui_gateway_run_a_script_the_wheel_installs() -> None:
    entry = [a for i, a in stages()[-1] if i == "ENTRYPOINT"]
    argv = json.loads(entry[-1])
    assert argv == ["agui-gateway", "run"]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[0] in scripts


def test_compose_builds_the_image_and_installs_or_mounts_nothing() -> None:
    gateway = compose()["services"]["gateway"]
    assert gateway["build"]["context"] == "."
    assert (REPO_ROOT / gateway["build"]["dockerfile"]) == DOCKERFILE
    assert "volumes" not in gateway, "nothing of the checkout is mounted into the gateway"
    assert "command" not in gateway and "entrypoint" not in gateway  # the image's own
    assert "pip install" not in COMPOSE.read_text()


def test_compose_mounts_exist() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (REPO_ROOT / source).exists(), (name, source)


def test_ports_and_service_names_agree_with_deploy() -> None:
    services = compose()["services"]
    assert set(services) >= {"kafka", "gateway", "prometheus", "grafana"}
    assert set(services) >= {"gateway-2", "gateway-3", "edge", "bridge"}
    kafka_env = services["kafka"]["environment"]
    internal = re.search(r"PLAINTEXT://kafka:(\d+)", kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    assert internal
    gateway = services["gateway"]
    assert gateway["environment"]["AGUI_GATEWAY_BOOTSTRAP_SERVERS"] == f"kafka:{internal[1]}"
    port = int(gateway["environment"]["AGUI_GATEWAY_HTTP_PORT"])
    assert port == HTTP_PORT
    assert f"127.0.0.1:{port}:{port}" in gateway["ports"]
    # the host port of the compose broker is deploy/kafka.sh's default, and its version
    kafka_sh = KAFKA_SH.read_text()
    assert "127.0.0.1:9092:9092" in services["kafka"]["ports"]
    assert "KAFKA_PORT=${KAFKA_PORT:-9092}" in kafka_sh
    pinned = re.search(r"^PINNED_KAFKA_VERSION=(\S+)$", kafka_sh, re.M)
    assert pinned and services["kafka"]["image"] == f"apache/kafka:{pinned[1]}"
    # Prometheus scrapes the gateway by service name; Grafana reads Prometheus by its name
    scrape = yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets["agui-gateway"] == [f"{name}:{port}" for name in GATEWAYS]
    prom_port = services["prometheus"]["ports"][0].rsplit(":", 1)[1]
    datasource = yaml.safe_load(DATASOURCE_YML.read_text())["datasources"][0]
    assert datasource["url"] == f"http://prometheus:{prom_port}"


GATEWAYS = ["gateway", "gateway-2", "gateway-3"]


def test_three_gateway_instances_are_static_members_each_of_its_own_name() -> None:
    services = compose()["services"]
    envs = [services[name]["environment"] for name in GATEWAYS]
    assert {env["AGUI_GATEWAY_INSTANCE_NAME"] for env in envs} == {
        "gateway-1",
        "gateway-2",
        "gateway-3",
    }
    assert all(env["AGUI_GATEWAY_STATIC_MEMBERSHIP"] == "true" for env in envs)
    assert len({env.get("AGUI_GATEWAY_GROUP_ID") for env in envs}) == 1  # one gateway
    host_ports = [services[name]["ports"][0] for name in GATEWAYS]
    assert len(set(host_ports)) == 3 and all(p.endswith(f":{HTTP_PORT}") for p in host_ports)
    for name in GATEWAYS:  # one image, run as the image says
        assert services[name]["image"] == services["gateway"]["image"]
        assert "entrypoint" not in services[name] and "command" not in services[name]


@pytest.mark.parametrize("name", ["gateway", "gateway-2", "gateway-3", "edge", "bridge"])
def test_every_service_of_the_image_has_settings_the_gateway_accepts(name, monkeypatch) -> None:
    service = compose()["services"][name]
    env = {k: str(v) for k, v in service["environment"].items()}
    assert unknown_environment(Settings, env) == []
    for key in [k for k in os.environ if k.startswith("AGUI_GATEWAY_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    Settings()  # valid, or this raises
    if name in ("edge", "bridge"):  # the image's console script, another command
        assert service["entrypoint"] == ["agui-gateway", name]
        assert service["image"] == compose()["services"]["gateway"]["image"]


def test_the_demo_on_the_host_is_scraped_by_the_compose_prometheus() -> None:
    scrape = yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]
    demo = [job for job in scrape if job["job_name"] == "agui-gateway-demo"]
    assert demo and demo[0]["static_configs"][0]["targets"] == [f"host.docker.internal:{HTTP_PORT}"]
    hosts = compose()["services"]["prometheus"]["extra_hosts"]
    assert "host.docker.internal:host-gateway" in hosts


def _major(image: str) -> int:
    tag = image.rsplit(":", 1)[1].lstrip("v")
    return int(tag.split(".")[0])


def test_prometheus_and_grafana_images_are_current_and_so_is_the_dashboard() -> None:
    services = compose()["services"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:v")
    assert _major(services["prometheus"]["image"]) >= 3
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    assert _major(services["grafana"]["image"]) >= 12
    # Grafana 12's dashboard schema (its migrations end at 42)
    assert json.loads(DASHBOARD.read_text())["schemaVersion"] >= 42
