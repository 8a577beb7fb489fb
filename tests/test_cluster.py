"""A Ray cluster whose nodes share no disk: the worker node cannot see the folder that holds the tasks, the registry
file and its skill folders, and cannot write the cache folder the driver names, so the images and the registry
travel with the work and the cache only helps; a cluster smaller than `--workers` starts with what it has; a
worker's warning reaches the driver's terminal; a node lost mid-run is named and its items finish elsewhere. Also:
the deployment files a user applies (Dockerfile, KubeRay manifests, the job's runtime env) validate against the
KubeRay CRD schemas and run the command this page documents."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from PIL import Image
from services import kill_node, ray_env, ray_node, ray_two_nodes, session_pids
from test_scale import BARCODE_TASKS, _records

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MAESTRO = Path(sys.executable).parent / "maestro"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(address, driver-only folder, read-only folder): a head without CPUs and a worker node of 2 CPUs started in a
    folder of its own, to which the driver-only folder is an empty tmpfs and the read-only folder is read-only."""
    hidden, read_only = tmp_path_factory.mktemp("driver-only"), tmp_path_factory.mktemp("read-only-there")
    with pytest.MonkeyPatch.context() as env:
        for name, value in _NODE_HEALTH.items():
            env.setenv(name, value)
        with ray_two_nodes(hidden=hidden, workdir=tmp_path_factory.mktemp("worker-node"),
                           read_only=read_only) as address:
            yield address, hidden, read_only


_NODE_HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                "RAY_health_check_failure_threshold": "3"}
"""The head notices a lost node within about 3-6 s instead of Ray's 15-30 s (Ray's own settings, read from the
environment by the processes it starts)."""


def _task_folder(folder: Path) -> Path:
    """Four real barcode items and an animated copy of the first (two frames: loading it warns), in `folder`."""
    folder.mkdir()
    (folder / "images").mkdir()
    lines = BARCODE_TASKS.read_text().splitlines()[:4]
    tasks = [json.loads(line) for line in lines]
    for task in tasks:
        shutil.copy(BARCODE_TASKS.parent / task["images"][0], folder / task["images"][0])
    first = Image.open(folder / tasks[0]["images"][0]).convert("RGB")
    first.save(folder / "images" / "animated.gif", save_all=True, append_images=[first.rotate(180)])
    tasks.append({**tasks[0], "id": "animated", "images": ["images/animated.gif"]})
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return folder / "tasks.jsonl"


def _own_registry(folder: Path, **expert_options) -> Path:
    """Two barcode readers on copies of the two barcode skills in `folder` (not the package's): the registry file
    and the skill folders exist on the driver's disk only. With options, the first reader is a gated one."""
    for skill in ("barcode-reading", "barcode"):
        shutil.copytree(ROOT / "skills" / skill, folder / "skills" / skill)
    first = ({"type": "python", "entry": "fakes:GatedBarcodeExpert", "options": expert_options} if expert_options else
             {"type": "python", "entry": "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"})
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": ["skills"], "models": [
        {"name": "zxing", "description": "zxing-cpp barcode reader.", "capabilities": ["barcode"], "backend": first,
         "cost": {"per_call": 0.01}, "timeout_s": 150},  # a gated call waits until every worker has started
        {"name": "opencv-barcode", "description": "OpenCV barcode and QR reader.", "capabilities": ["barcode"],
         "backend": {"type": "python", "entry": "maestro_graph.experts.opencv_barcode:OpenCVBarcodeExpert"},
         "cost": {"per_call": 0.01}}]}))
    return path


@pytest.mark.slow  # one two-node cluster start (about 10 s, shared by the module) and two predict runs
def test_predict_on_a_node_without_the_driver_s_files_writes_the_uncached_thread_records(cluster, tmp_path):
    address, hidden, read_only = cluster
    folder = hidden / "own-files"
    tasks = _task_folder(folder)  # the tasks, the registry and its skills: on the driver's disk only
    registry = _own_registry(folder)

    def predict(out: str, *extra: str) -> subprocess.Popen:
        # from the task folder, as a user runs it; three workers on a cluster with two CPUs
        return subprocess.Popen([str(MAESTRO), "predict", "-t", tasks.name, "-o",
                                 str(tmp_path / out / "predictions" / "rules.jsonl"), "-p", "rules", "--workers", "3",
                                 "--registry", str(registry), *extra],
                                cwd=tasks.parent, env={**os.environ, **ray_env()}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def finish(proc: subprocess.Popen) -> str:
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, output[-3000:]
        return output

    finish(predict("threads", "--no-cache"))
    # a cache folder the driver can write and the worker node cannot: the workers run every step uncached
    output = finish(predict("ray", "--executor", f"ray:{address}", "--cache-dir", str(read_only / "cache")))
    records = _records(tmp_path / "ray")["rules"]
    assert len(records) == 5 and all(r["error"] is None and not r["failed"] for r in records), records
    assert all(r["answer"] is not None for r in records[:4]), records
    assert _records(tmp_path / "threads") == _records(tmp_path / "ray")
    shown = [line for line in output.splitlines() if "has 2 frames; only the first is read" in line]
    assert shown and all("_RayWorker" in line for line in shown), output[-3000:]  # from a worker, named as such
    told = [line for line in output.splitlines() if "cannot write an entry" in line]
    assert told and all("Read-only file system" in line and "_RayWorker" in line for line in told), output[-3000:]
    assert len(told) <= 2  # once per worker process, not once per call
    threads_counts, ray_counts = _counters(tmp_path / "threads"), _counters(tmp_path / "ray")
    calls = {k: v for k, v in threads_counts.items() if k.startswith("maestro_expert_calls_total")}
    assert calls and calls == {k: v for k, v in ray_counts.items() if k.startswith("maestro_expert_calls_total")}
    assert ray_counts["maestro_cache_errors_total"] > 0 and "maestro_batch_workers_lost_total" not in str(ray_counts)
    by_worker = {k: v for k, v in ray_counts.items() if k.startswith("maestro_batch_items_total{worker=")}
    assert sum(by_worker.values()) == 5 and 1 <= len(by_worker) <= 2  # the two workers the cluster could place


@pytest.mark.slow  # a third node (about 5 s to join), twelve items on four workers, then two
def test_a_node_lost_mid_run_is_named_and_its_items_finish_on_the_other_workers(cluster, tmp_path):
    address, _, _ = cluster
    inside, gate = tmp_path / "inside", tmp_path / "gate"
    inside.mkdir()
    registry = _own_registry(tmp_path, inside=str(inside), gate=str(gate))
    out = tmp_path / "predictions.jsonl"
    with ray_node(address, num_cpus=2) as doomed:
        proc = subprocess.Popen([str(MAESTRO), "predict", "-t", str(BARCODE_TASKS), "-o", str(out), "-p",
                                 "fixed:zxing@@barcode-reading", "--workers", "4", "--no-cache", "--registry",
                                 str(registry), "--executor", f"ray:{address}"], env={**os.environ, **ray_env()},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while len(list(inside.iterdir())) < 4:  # every worker, on either node, is inside an item
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.1)
        workers = session_pids(doomed.pid, b"_RayWorker")
        assert workers and workers <= {int(p.name) for p in inside.iterdir()}, workers
        kill_node(doomed)
        killed = time.monotonic()
        gate.touch()
        output = proc.communicate(timeout=300)[0]
    print(f"{len(workers)} workers lost with their node; the run ended {time.monotonic() - killed:.1f} s later")
    assert proc.returncode == 4, output[-3000:]  # PredictExit.LOST_CAPACITY: every item ran, on fewer workers
    records = [json.loads(line) for line in out.read_text().splitlines()]
    every = [json.loads(line)["id"] for line in BARCODE_TASKS.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(every)  # each item once
    assert all(r["error"] is None and r["steps"][0]["error"] is None for r in records)
    named = set(re.findall(r"^lost worker (\S+:\d+) \(died", output, re.M))
    assert workers and {int(name.rsplit(":", 1)[1]) for name in named} == workers, (workers, output[-3000:])
    # replacements asked for before the head knew the node was gone may have been placed there and died unstarted
    assert int(re.search(r"^(\d+) workers lost", output, re.M).group(1)) >= len(workers), output[-3000:]
    counters = _counters_file(out.with_name("predictions.metrics.prom"))
    died = {key.split('worker="')[1].split('"')[0] for key in counters
            if key.startswith('maestro_batch_workers_lost_total{stage="run"')}
    assert died == named


def test_a_registry_bundle_unpacked_on_another_disk_is_the_same_registry(tmp_path):
    from maestro_graph.batch.executors import RegistrySource
    from maestro_graph.batch.measure import measure_pairs
    from maestro_graph.core.tasks import load_tasks
    from maestro_graph.registry import Registry
    from maestro_graph.registry.config import default_config_path

    driver = tmp_path / "driver"
    (driver / "base").mkdir(parents=True)
    _own_registry(driver / "base")  # the base registry, with its own skill folders
    own = driver / "own.yaml"  # extends it and names a profile of its own, beside it
    own.write_text(yaml.safe_dump({"extends": "base/registry.yaml", "profile": "own.profile.json"}))
    measured = Registry.load(own, profiled=False)
    measure_pairs(measured, load_tasks(BARCODE_TASKS)[0][:2], workers=1, progress=False).write_profile(
        measured, "two barcode items", driver / "own.profile.json")
    source = RegistrySource(own)
    bundle = source.bundle()
    assert {"registry.yaml", "registry.profile.json", "registry.profile.reach.safetensors",
            "skills/0/barcode/SKILL.md"} <= set(bundle.files)
    assert source.bundle().digest == bundle.digest  # content-addressed: the same files, the same digest
    packaged = RegistrySource(default_config_path()).bundle()  # the package's skills and profile: named, not sent
    assert set(packaged.files) == {"registry.yaml"}
    assert yaml.safe_load(packaged.files["registry.yaml"])["profile"] == "package:default_registry.profile.json"
    hashes = {name: skill.code_hash for name, skill in measured.skills.items()}
    shutil.rmtree(driver)  # the worker's node has none of the driver's files
    assert not RegistrySource(None).on_node(None).config  # the packaged registry is every node's own

    shipped = source.on_node(bundle).load()
    again = source.on_node(bundle)  # a second worker of the node reads the copy the first unpacked
    assert again.config == source.on_node(bundle).config and again.config.is_relative_to(tempfile.gettempdir())
    assert shipped.pair_ids() == measured.pair_ids() and len(shipped.pair_ids()) == 2
    assert {name: skill.code_hash for name, skill in shipped.skills.items()} == hashes  # cached steps still fit
    assert sorted(shipped.profiles) == sorted(measured.pair_ids()) and shipped.reach is not None
    assert shipped.reach.pairs == {p: e.fingerprint for p, e in shipped.profiles.items()}


def test_a_node_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    """Skill code is unpacked there and run: a folder another user could write (or made first) is not used."""
    from maestro_graph.batch.executors import node_folder
    from maestro_graph.errors import ConfigError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = node_folder()
    assert folder.parent == tmp_path and folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match=r"only it can write .*mode drwxrwxrwx"):
        node_folder()


def _counters(run: Path) -> dict[str, float]:
    """The counters of a predict run's metrics file (Prometheus text format), by name and labels."""
    return _counters_file(run / "predictions" / "rules.metrics.prom")


def _counters_file(path: Path) -> dict[str, float]:
    return {name: float(value) for line in path.read_text().splitlines() if not line.startswith("#")
            for name, value in [line.rsplit(" ", 1)] if name.split("{")[0].endswith("_total")}


KUBERAY_VERSION = "v1.7.0"
"""The operator whose CRD schemas tests/data/kuberay holds (tests/data/kuberay/SOURCE.md) and docs/scale.md names."""
SCHEMAS = ROOT / "tests" / "data" / "kuberay"
WORKER_GB = 1.7
"""The largest RSS of one Maestro worker measured after 24 items (docs/scale.md, CPU-bound experts)."""
IMAGE_UID = 1000


def _strict(schema):
    """The schema as `kubectl apply --validate=strict` reads it: a field it does not declare is an error (the API
    server would drop it silently), except under `x-kubernetes-preserve-unknown-fields`."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {k: _strict(v) for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


def _problems(doc: dict) -> list[str]:
    import jsonschema

    schema = _strict(json.loads((SCHEMAS / f"ray.io_{doc['kind'].lower()}s.v1.schema.json").read_text()))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]


def _gib(quantity: str) -> float:
    units = {"Gi": 2**30, "Mi": 2**20, "G": 1e9, "M": 1e6}
    unit = next((u for u in units if quantity.endswith(u)), "")
    return float(quantity.removesuffix(unit)) * units.get(unit, 1) / 1e9


def test_the_schema_check_catches_what_the_api_server_would_refuse_or_drop():
    cluster = yaml.safe_load((DEPLOY / "kuberay-raycluster.yaml").read_text())
    assert _problems(cluster) == []
    cluster["spec"]["autoscalerOptions"]["evn"] = [{"name": "RAY_AUTH_TOKEN", "value": "x"}]  # a typo: dropped
    cluster["spec"]["authOptions"]["mode"] = "tokens"
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = "1"
    problems = " | ".join(_problems(cluster))
    assert "'evn' was unexpected" in problems and "'tokens' is not one of" in problems, problems
    assert "'1' is not of type 'integer'" in problems, problems


def test_deploy_files_validate_against_the_kuberay_schemas_and_agree_with_the_image():
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    instructions = [line.split(maxsplit=1) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert instructions[0][0] == "FROM" and any('".[ray,redis]"' in rest for op, rest in instructions if op == "RUN")
    kept = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for op, rest in instructions:
        if op == "COPY":  # from the repository root, and not left out of the build context
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists() and (f"!{source}" in kept or f"!{source}/**" in kept), source
    (ray_pin,) = [word for op, rest in instructions if op == "RUN" for word in rest.split() if "ray[default]==" in word]
    ray_version = ray_pin.strip('"').split("==")[1]
    user = [rest for op, rest in instructions if op == "USER"][-1]
    assert any(op == "RUN" and f"--uid {IMAGE_UID} {user}" in rest for op, rest in instructions)
    runtime_env = yaml.safe_load((DEPLOY / "runtime_env.yaml").read_text())
    assert set(runtime_env) <= {"working_dir", "env_vars", "excludes"}
    assert all(isinstance(v, str) for v in runtime_env["env_vars"].values())

    manifests = {doc["kind"]: doc for path in sorted(DEPLOY.glob("kuberay-*.yaml"))
                 for doc in yaml.safe_load_all(path.read_text())}
    assert {"RayJob", "RayCluster"} <= set(manifests)
    assert f"KubeRay {KUBERAY_VERSION}" in (ROOT / "docs" / "scale.md").read_text()
    for kind in ("RayJob", "RayCluster"):
        doc = manifests[kind]
        assert _problems(doc) == [], kind
        cluster = doc["spec"]["rayClusterSpec"] if kind == "RayJob" else doc["spec"]
        assert cluster["rayVersion"] == ray_version  # one Ray in the image and the manifests
        # the operator hands the secret's token to head, workers, autoscaler (and a RayJob's submitter); a token
        # written into a container by hand would be a second copy that can disagree
        assert cluster["authOptions"] == {"mode": "token", "secretName": "maestro-ray-token"}
        groups = cluster["workerGroupSpecs"]
        assert cluster.get("enableInTreeAutoscaling") is True  # workers grow as the executor asks for them
        assert all(g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in groups)
        pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in groups)]
        if kind == "RayJob":
            pods.append(doc["spec"]["submitterPodTemplate"])
        for pod in pods:
            container = pod["spec"]["containers"][0]
            assert container["image"].startswith("maestro-graph")  # the image deploy/Dockerfile builds
            assert not {e["name"] for e in container.get("env", [])} & {"RAY_AUTH_TOKEN", "RAY_AUTH_MODE"}
        for pod in pods[:1 + len(groups)]:  # Ray's nodes: the temporary folder is the node's own and writable
            spec, container = pod["spec"], pod["spec"]["containers"][0]
            node_local = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
            assert any(m["mountPath"] == "/tmp" and m["name"] in node_local for m in container["volumeMounts"])
            assert spec["securityContext"]["fsGroup"] == IMAGE_UID
        for group in groups:
            workers = int(group["rayStartParams"]["num-cpus"])
            memory = group["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            assert _gib(memory) >= 1.25 * workers * WORKER_GB, (memory, workers)  # measured, with headroom
    entrypoint = manifests["RayJob"]["spec"]["entrypoint"].split()
    assert entrypoint[:2] == ["maestro", "predict"] and "--executor" in entrypoint
    assert entrypoint[entrypoint.index("--executor") + 1] == "ray:auto"
    assert "--cache-dir" not in entrypoint  # the default is each node's own folder (a path only the head has is not)
    assert yaml.safe_load(manifests["RayJob"]["spec"]["runtimeEnvYAML"]) == runtime_env  # one runtime env


REFERENCES = {  # (where a pod spec names another object, the kind it names)
    ("persistentVolumeClaim", "claimName"): "PersistentVolumeClaim", ("configMap", "name"): "ConfigMap",
    ("configMapRef", "name"): "ConfigMap", ("configMapKeyRef", "name"): "ConfigMap", ("secret", "secretName"): "Secret",
    ("secretRef", "name"): "Secret", ("secretKeyRef", "name"): "Secret", ("authOptions", "secretName"): "Secret",
}


def _references(node, found: set[tuple[str, str]], parent: str = "") -> set[tuple[str, str]]:
    """Every (kind, name) a manifest refers to (volumes, env, `authOptions`, a pod's service account) and every
    ("image", reference) of its containers."""
    if isinstance(node, list):
        for item in node:
            _references(item, found, parent)
    elif isinstance(node, dict):
        for key, value in node.items():
            if (parent, key) in REFERENCES:
                found.add((REFERENCES[parent, key], value))
            elif key == "serviceAccountName":
                found.add(("ServiceAccount", value))
            elif key == "image" and parent == "":
                found.add(("image", value))
            _references(value, found, key if isinstance(value, dict) else "")
    return found


def test_a_first_apply_finds_everything_the_manifests_reference():
    """No Kubernetes runs here (no container engine to run kind, k3d or minikube in), so this is the first apply
    read from the files: every volume claim, ConfigMap and service account a manifest names is defined in deploy/;
    every Secret is created by a command docs/scale.md and the manifest give; every image is the one the Dockerfile
    builds, with the docs' commands to load it into a local cluster or push it; the base image and every package are
    pinned; every container has resources; the job has a deadline; the task folder is where the docs copy it."""
    docs = (ROOT / "docs" / "scale.md").read_text()
    files = {path.name: path.read_text() for path in sorted(DEPLOY.glob("kuberay-*.yaml"))}
    manifests = {name: list(yaml.safe_load_all(text)) for name, text in files.items()}
    defined = {(doc["kind"], doc["metadata"]["name"]) for docs_ in manifests.values() for doc in docs_}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    (tag,) = set(re.findall(r"docker build -f deploy/Dockerfile -t (\S+) \.", dockerfile + docs))
    for name, docs_ in manifests.items():
        for kind, ref in sorted(_references(docs_, set())):
            if kind == "image":
                assert ref == tag, f"{name}: image {ref} is not the one deploy/Dockerfile builds ({tag})"
            elif kind == "Secret":
                create = f"kubectl create secret generic {ref} "
                assert create in docs and create in files[name], f"{name}: no command creates Secret {ref}"
            else:
                assert (kind, ref) in defined, f"{name}: {kind} {ref} is defined in no file of deploy/"
        # the documented push replaces every image line (`sed 's#image: TAG#image: REGISTRY/TAG#'`)
        assert files[name].count(f"image: {tag}") == files[name].count("image:"), name
    for command in (f"kind load docker-image {tag}", f"k3d image import {tag}", f"minikube image load {tag}",
                    f"docker push REGISTRY/{tag}", f"sed 's#image: {tag}#image: REGISTRY/{tag}#'"):
        assert command in docs, command
    assert "no kubernetes cluster runs here" in docs.lower()

    (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?", base), f"base image {base} unpinned"
    assert "-c deploy/constraints.txt" in dockerfile
    pins = dict(line.split("==") for line in (DEPLOY / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert all(re.fullmatch(r"[\w.!+-]+", version) for version in pins.values())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["ray"],
              *project["optional-dependencies"]["redis"], "aiohttp", "opencensus", "py-spy", "virtualenv"]
    unpinned = [w for w in wanted if canonicalize_name(Requirement(w).name) not in pins]
    assert unpinned == [], f"deploy/constraints.txt lacks {unpinned}: run scripts/deploy_constraints.py"
    assert pins["torch"] == "2.13.0" and f"ray[default]=={pins['ray']}" in dockerfile

    job = manifests["kuberay-rayjob.yaml"][0]
    assert job["spec"]["activeDeadlineSeconds"] > 0
    pods = [doc["spec"] for docs_ in manifests.values() for doc in docs_ if doc["kind"] == "Pod"]
    for docs_ in manifests.values():
        for doc in docs_:
            spec = doc["spec"].get("rayClusterSpec", doc["spec"])
            if doc["kind"] == "RayJob":
                pods.append(doc["spec"]["submitterPodTemplate"]["spec"])
            if "headGroupSpec" in spec:
                pods += [spec["headGroupSpec"]["template"]["spec"],
                         *(g["template"]["spec"] for g in spec["workerGroupSpecs"])]
    for pod in pods:
        for container in pod["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]) & set(resources["limits"]), container["name"]
    tasks = next(job["spec"]["entrypoint"].split()[i + 1] for i, word in enumerate(job["spec"]["entrypoint"].split())
                 if word == "-t")
    assert f"maestro-data-loader:{Path(tasks).parent}" in docs and f"maestro-data-loader:{Path(tasks).parent}" \
        in files["kuberay-data.yaml"]
