"""`trainrun k8s`: the manifest parses as YAML and holds the objects a Kubeflow MPIJob run needs.

Only the structure is tested here (no cluster): kinds, replicas, resources, volumes, that the
ConfigMap's config is one trainrun itself accepts, and that the MPIJob holds only fields of
Kubeflow's v2beta1 MPIJob definition, with their types. bench/container_check.sh runs the MPIJob
for real as containers and checks the core objects with kubernetes-validate.
"""

import copy
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("TRAINRUN_BIN", str(REPO / "build" / "trainrun"))
QUICKSTART = REPO / "configs" / "quickstart.yaml"


def k8s(*args, check=True):
    r = subprocess.run([BIN, "k8s", str(QUICKSTART), *map(str, args)], capture_output=True,
                       text=True, timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def manifest(*args):
    docs = [d for d in yaml.safe_load_all(k8s(*args).stdout) if d is not None]
    return {d["kind"]: d for d in docs}, [d["kind"] for d in docs]


def pod(job, role):
    spec = job["spec"]["mpiReplicaSpecs"][role]
    return spec, spec["template"]["spec"], spec["template"]["spec"]["containers"][0]


def test_gpu_workers_with_a_new_claim(tmp_path):
    objs, kinds = manifest("--nodes", 2, "--gpus-per-node", 8, "--ranks-per-node", 8,
                           "--image", "registry.example/trainrun:0.1", "--namespace", "ml",
                           "--storage", "500Gi", "--set", "train.batch_size=64")
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "MPIJob"]
    for o in objs.values():
        assert o["metadata"]["namespace"] == "ml"

    config = objs["ConfigMap"]["data"]["config.yaml"]
    cfg = yaml.safe_load(config)
    assert cfg["run_dir"] == "/runs/quickstart"
    assert cfg["distributed"]["nodes"] == 2 and cfg["distributed"]["nproc"] == 8
    assert cfg["train"]["batch_size"] == 64
    # The pod's config is one trainrun accepts as it stands.
    f = tmp_path / "config.yaml"
    f.write_text(config)
    r = subprocess.run([BIN, "validate", str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr

    pvc = objs["PersistentVolumeClaim"]
    assert pvc["metadata"]["name"] == "quickstart-runs"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "500Gi"

    job = objs["MPIJob"]
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    assert job["spec"]["slotsPerWorker"] == 8
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert job["spec"]["runPolicy"]["backoffLimit"] >= 1

    launcher, launcher_pod, launcher_c = pod(job, "Launcher")
    assert launcher["replicas"] == 1 and launcher["restartPolicy"] == "OnFailure"
    assert launcher_c["command"] == ["mpirun", "-np", "16", "--bind-to", "none", "trainrun", "run",
                                     "/config/config.yaml", "--resume"]
    assert launcher_c["image"] == "registry.example/trainrun:0.1"

    worker, worker_pod, worker_c = pod(job, "Worker")
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "OnFailure"
    assert worker_c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert set(worker_c["resources"]["limits"]) == {"nvidia.com/gpu", "cpu", "memory"}
    mounts = {m["mountPath"]: m["name"] for m in worker_c["volumeMounts"]}
    assert mounts == {"/config": "config", "/runs": "runs"}
    vols = {v["name"]: v for v in worker_pod["volumes"]}
    assert vols["config"]["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"]
    assert vols["runs"]["persistentVolumeClaim"]["claimName"] == "quickstart-runs"


def test_cpu_workers_on_an_existing_claim():
    objs, kinds = manifest("--pvc", "team-runs", "--set", "distributed.nproc=2")
    assert kinds == ["ConfigMap", "MPIJob"]
    job = objs["MPIJob"]
    assert job["spec"]["slotsPerWorker"] == 2
    worker, worker_pod, worker_c = pod(job, "Worker")
    assert worker["replicas"] == 1
    assert "nvidia.com/gpu" not in worker_c["resources"]["limits"]
    assert {v["name"]: v for v in worker_pod["volumes"]}["runs"]["persistentVolumeClaim"] == \
        {"claimName": "team-runs"}
    _, _, launcher_c = pod(job, "Launcher")
    assert launcher_c["command"][:3] == ["mpirun", "-np", "2"]


def test_metrics_endpoint_is_annotated_for_prometheus():
    objs, _ = manifest()
    worker, _, worker_c = pod(objs["MPIJob"], "Worker")
    assert "metadata" not in worker["template"] and "ports" not in worker_c

    objs, _ = manifest("--set", "logging.prometheus_port=9500")
    assert yaml.safe_load(objs["ConfigMap"]["data"]["config.yaml"])["logging"][
        "prometheus_port"] == 9500
    worker, _, worker_c = pod(objs["MPIJob"], "Worker")
    # Rank 0 runs on the first worker: the usual kubernetes_sd relabelling finds it by these.
    assert worker["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9500",
        "prometheus.io/path": "/metrics"}
    assert worker_c["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}]
    launcher, _, launcher_c = pod(objs["MPIJob"], "Launcher")
    assert "metadata" not in launcher["template"] and "ports" not in launcher_c


@pytest.mark.parametrize("args,message", [
    (["--gpus-per-node", "1", "--ranks-per-node", "2"], "each rank drives its own GPU"),
    (["--namespace", "Team_A"], "--namespace"),
    (["--nodes", "3"], "not divisible"),
])
def test_refuses_impossible_options(args, message):
    r = k8s(*args, check=False)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr


# Values the cluster would refuse (or misread) are refused here, by Kubernetes' own grammars:
# the image reference, a claim name (DNS-1123 subdomain), a namespace (DNS-1123 label) and the
# quantities of cpu, memory and storage. Each message names the option, the value and an example.
@pytest.mark.parametrize("option,value,example", [
    ("--image", "Trainrun:latest", "registry.example.com/team/trainrun:v1"),
    ("--image", "trainrun:la test", "registry.example.com/team/trainrun:v1"),
    ("--image", "registry/trainrun::v1", "registry.example.com/team/trainrun:v1"),
    ("--image", "trainrun:" + "v" * 129, "registry.example.com/team/trainrun:v1"),
    ("--image", "trainrun@sha256:abc", "registry.example.com/team/trainrun:v1"),
    ("--image", "/trainrun", "registry.example.com/team/trainrun:v1"),
    ("--image", "trainrun--:v1", "registry.example.com/team/trainrun:v1"),
    ("--pvc", "My_Claim", "trainrun-runs"),
    ("--pvc", "-claim", "trainrun-runs"),
    ("--pvc", "claim.", "trainrun-runs"),
    ("--pvc", "a" * 254, "trainrun-runs"),
    ("--namespace", "-team", "team-a"),
    ("--namespace", "team-", "team-a"),
    ("--cpu", "2 cores", "500m"),
    ("--cpu", "-1", "500m"),
    ("--cpu", "0", "500m"),
    ("--cpu", "1.5.2", "500m"),
    ("--cpu", "nan", "500m"),
    ("--memory", "64GB", "64Gi"),
    ("--memory", "4gi", "64Gi"),
    ("--memory", "-1Gi", "64Gi"),
    ("--memory", "500m", "64Gi"),
    ("--storage", "100GB", "100Gi"),
    ("--storage", "0", "100Gi"),
])
def test_refuses_values_kubernetes_would_refuse(option, value, example):
    r = k8s(option, value, check=False)
    assert r.returncode == 2, r.stdout
    assert f"k8s {option} '{value}'" in r.stderr, r.stderr
    assert example in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("option,value", [
    ("--image", "trainrun"), ("--image", "trainrun:latest"),
    ("--image", "localhost:5000/team/trainrun:v1.2"),
    ("--image", "ghcr.io/org/train_run-x__y.z/sub@sha256:" + "a" * 64),
    ("--image", "registry.example.com:443/a/b:TAG_1@sha256:" + "0" * 64),
    ("--image", "[::1]:5000/trainrun:v1"), ("--image", "REGISTRY/trainrun:TAG"),
    ("--pvc", "runs.team-a"), ("--pvc", "r"), ("--namespace", "t1"),
    ("--cpu", "500m"), ("--cpu", "2"), ("--cpu", "1.5"), ("--cpu", ".5"), ("--cpu", "+4"),
    ("--memory", "4Gi"), ("--memory", "1.5G"), ("--memory", "512Mi"), ("--memory", "1e9"),
    ("--memory", "128974848"), ("--storage", "1Ti"), ("--storage", "0.5Ti"),
])
def test_accepts_what_kubernetes_accepts(option, value):
    objs, _ = manifest(option, value)
    _, _, worker_c = pod(objs["MPIJob"], "Worker")
    if option == "--image":
        assert worker_c["image"] == value
    elif option in ("--cpu", "--memory"):
        assert str(worker_c["resources"]["limits"][option[2:]]) == value


# ---- The MPIJob against Kubeflow's v2beta1 MPIJob definition ----------------------------------
# kubernetes-validate (bench/container_check.sh) knows only core kinds; an MPIJob is a CRD. These
# are the fields of mpi-operator's v2beta1 types (MPIJobSpec, RunPolicy, SchedulingPolicy,
# ReplicaSpec) with their JSON types, and the rules of its admission validation (required
# fields, enums, replica counts, the worker pod's DNS name), written out here. Unknown fields and
# wrong types are refused at every level. Inside the pod template only the core v1 fields that
# trainrun writes are listed (the bench validates the template against the full core schema):
# a new one fails here until it is added below.
INT, STR, BOOL = "int", "str", "bool"
QUANTITY = "quantity"  # int-or-string (a JSON number or "8", "64Gi")


def listof(item):
    return ("list", item)


def mapof(value):
    return ("map", value)


def enum(*values):
    return ("enum", values)


OBJECT_META = {"name": STR, "namespace": STR, "labels": mapof(STR), "annotations": mapof(STR)}
CONTAINER = {
    "name": STR, "image": STR, "imagePullPolicy": enum("Always", "IfNotPresent", "Never"),
    "command": listof(STR), "args": listof(STR), "workingDir": STR,
    "env": listof({"name": STR, "value": STR}),
    "ports": listof({"name": STR, "containerPort": INT, "protocol": enum("TCP", "UDP", "SCTP")}),
    "resources": {"limits": mapof(QUANTITY), "requests": mapof(QUANTITY)},
    "volumeMounts": listof({"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR}),
}
VOLUME = {"name": STR, "configMap": {"name": STR, "defaultMode": INT},
          "persistentVolumeClaim": {"claimName": STR, "readOnly": BOOL},
          "emptyDir": {"medium": STR, "sizeLimit": QUANTITY}}
POD_TEMPLATE_SPEC = {"metadata": OBJECT_META,
                     "spec": {"containers": listof(CONTAINER), "volumes": listof(VOLUME)}}
REPLICA_SPEC = {"replicas": INT, "template": POD_TEMPLATE_SPEC,
                "restartPolicy": enum("Always", "OnFailure", "Never", "ExitCode")}
RUN_POLICY = {
    "cleanPodPolicy": enum("None", "Running", "All"), "ttlSecondsAfterFinished": INT,
    "activeDeadlineSeconds": INT, "backoffLimit": INT,
    "schedulingPolicy": {"minAvailable": INT, "queue": STR, "minResources": mapof(QUANTITY),
                         "priorityClass": STR, "scheduleTimeoutSeconds": INT},
    "suspend": BOOL, "managedBy": enum("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"),
}
MPIJOB_SPEC = {
    "slotsPerWorker": INT, "runLauncherAsWorker": BOOL, "runPolicy": RUN_POLICY,
    "mpiReplicaSpecs": ("keys", ("Launcher", "Worker"), REPLICA_SPEC),
    "sshAuthMountPath": STR, "launcherCreationPolicy": enum("AtStartup", "WaitForWorkersReady"),
    "mpiImplementation": enum("OpenMPI", "Intel", "MPICH"),
}
MPIJOB = {"apiVersion": enum("kubeflow.org/v2beta1"), "kind": enum("MPIJob"),
          "metadata": OBJECT_META, "spec": MPIJOB_SPEC}


def schema_errors(value, schema, path="MPIJob"):
    """Every place `value` leaves `schema`: unknown fields, wrong types, values out of an enum."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: an object expected, got {type(value).__name__}"]
        errs = [f"{path}.{k}: unknown field" for k in value if k not in schema]
        for k, v in value.items():
            if k in schema:
                errs += schema_errors(v, schema[k], f"{path}.{k}")
        return errs
    if schema == INT:  # bool is an int to Python, not to Kubernetes
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif schema == STR:
        ok = isinstance(value, str)
    elif schema == BOOL:
        ok = isinstance(value, bool)
    elif schema == QUANTITY:
        ok = isinstance(value, (int, float, str)) and not isinstance(value, bool)
    elif schema[0] == "enum":
        return [] if value in schema[1] else [f"{path}: {value!r} is not one of {schema[1]}"]
    elif schema[0] == "list":
        if not isinstance(value, list):
            return [f"{path}: a list expected, got {type(value).__name__}"]
        return [e for i, v in enumerate(value) for e in schema_errors(v, schema[1], f"{path}[{i}]")]
    elif schema[0] in ("map", "keys"):
        if not isinstance(value, dict):
            return [f"{path}: an object expected, got {type(value).__name__}"]
        item = schema[1] if schema[0] == "map" else schema[2]
        errs = [f"{path}.{k}: unknown key (not one of {schema[1]})" for k in value
                if schema[0] == "keys" and k not in schema[1]]
        return errs + [e for k, v in value.items() if isinstance(k, str)
                       for e in schema_errors(v, item, f"{path}.{k}")]
    else:
        raise ValueError(schema)
    return [] if ok else [f"{path}: {type(value).__name__} {value!r} is not {schema}"]


def mpijob_errors(job):
    """The schema, then mpi-operator's admission rules (pkg/apis/kubeflow/validation)."""
    errs = schema_errors(job, MPIJOB)
    if errs:
        return errs
    spec = job["spec"]
    for field in ("slotsPerWorker", "sshAuthMountPath", "mpiReplicaSpecs"):
        if field not in spec:
            errs.append(f"spec.{field}: required")
    if spec.get("runPolicy", {}).get("cleanPodPolicy") is None:
        errs.append("spec.runPolicy.cleanPodPolicy: required")
    if spec.get("slotsPerWorker", 0) < 0:
        errs.append("spec.slotsPerWorker: must be >= 0")
    for field in ("backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds"):
        if spec.get("runPolicy", {}).get(field, 0) < 0:
            errs.append(f"spec.runPolicy.{field}: must be >= 0")
    replicas = spec.get("mpiReplicaSpecs", {})
    if "Launcher" not in replicas:
        errs.append("spec.mpiReplicaSpecs.Launcher: required")
    for role, r in replicas.items():
        where = f"spec.mpiReplicaSpecs.{role}"
        if "replicas" not in r:
            errs.append(f"{where}.replicas: required")
        if r.get("restartPolicy") not in ("Never", "OnFailure"):
            errs.append(f"{where}.restartPolicy: {r.get('restartPolicy')!r} not Never/OnFailure")
        if not r.get("template", {}).get("spec", {}).get("containers"):
            errs.append(f"{where}.template.spec.containers: at least one container")
    if replicas.get("Launcher", {}).get("replicas", 1) != 1:
        errs.append("spec.mpiReplicaSpecs.Launcher.replicas: must be 1")
    workers = replicas.get("Worker", {}).get("replicas", 1)
    if workers < 1:
        errs.append("spec.mpiReplicaSpecs.Worker.replicas: must be >= 1")
    # The last worker pod's hostname must be a DNS-1035 label.
    host = f"{job['metadata'].get('name', '')}-worker-{max(workers, 1) - 1}"
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", host):
        errs.append(f"metadata.name: the pod name {host!r} is not a DNS-1035 label")
    return errs


MPIJOB_OPTION_SETS = [
    [],
    ["--set", "distributed.nproc=2", "--pvc", "team-runs"],
    ["--nodes", 2, "--gpus-per-node", 8, "--ranks-per-node", 8, "--namespace", "ml",
     "--storage", "500Gi", "--set", "train.batch_size=64", "--set", "logging.prometheus_port=9500",
     "--set", "fault_tolerance.max_restarts=3"],
    ["--nodes", 4, "--cpu", 2, "--memory", "8Gi", "--set", "name=My_Experiment.v2"],
]


@pytest.mark.parametrize("args", MPIJOB_OPTION_SETS, ids=["default", "cpu-claim", "gpu", "named"])
def test_mpijob_matches_the_v2beta1_definition(args):
    objs, _ = manifest(*args)
    assert mpijob_errors(objs["MPIJob"]) == []


def test_the_mpijob_check_refuses_what_the_operator_would():
    objs, _ = manifest("--set", "logging.prometheus_port=9500")
    job = objs["MPIJob"]
    assert mpijob_errors(job) == []

    def broken(change):
        j = copy.deepcopy(job)
        change(j)
        return mpijob_errors(j)

    def spec(j):
        return j["spec"]

    def worker(j):
        return j["spec"]["mpiReplicaSpecs"]["Worker"]

    def container(j):
        return worker(j)["template"]["spec"]["containers"][0]

    assert broken(lambda j: spec(j).update(slotPerWorker=1)) == [
        "MPIJob.spec.slotPerWorker: unknown field"]
    assert broken(lambda j: spec(j)["runPolicy"].update(backoffLimit="6")) == [
        "MPIJob.spec.runPolicy.backoffLimit: str '6' is not int"]
    assert broken(lambda j: spec(j).update(slotsPerWorker=True)) == [
        "MPIJob.spec.slotsPerWorker: bool True is not int"]
    assert broken(lambda j: worker(j).update(replica=2)) == [
        "MPIJob.spec.mpiReplicaSpecs.Worker.replica: unknown field"]
    assert broken(lambda j: spec(j)["mpiReplicaSpecs"].update(Workers={})) == [
        "MPIJob.spec.mpiReplicaSpecs.Workers: unknown key (not one of ('Launcher', 'Worker'))"]
    assert broken(lambda j: container(j)["ports"][0].update(containerPort="9500")) == [
        "MPIJob.spec.mpiReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort: "
        "str '9500' is not int"]
    assert broken(lambda j: container(j).update(imagePullPolcy="Always")) == [
        "MPIJob.spec.mpiReplicaSpecs.Worker.template.spec.containers[0].imagePullPolcy: "
        "unknown field"]
    assert broken(lambda j: spec(j).update(mpiImplementation="openmpi")) == [
        "MPIJob.spec.mpiImplementation: 'openmpi' is not one of ('OpenMPI', 'Intel', 'MPICH')"]
    assert broken(lambda j: worker(j).update(restartPolicy="Always")) == [
        "spec.mpiReplicaSpecs.Worker.restartPolicy: 'Always' not Never/OnFailure"]
    assert broken(lambda j: spec(j)["mpiReplicaSpecs"]["Launcher"].update(replicas=2)) == [
        "spec.mpiReplicaSpecs.Launcher.replicas: must be 1"]
    assert broken(lambda j: spec(j).pop("slotsPerWorker")) == ["spec.slotsPerWorker: required"]
    assert broken(lambda j: j["metadata"].update(name="x" * 60)) == [
        f"metadata.name: the pod name {'x' * 60 + '-worker-0'!r} is not a DNS-1035 label"]
