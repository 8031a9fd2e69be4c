"""`trainrun k8s`: the manifest parses as YAML and holds the objects a Kubeflow MPIJob run needs.

Only the structure is tested here (no cluster): kinds, replicas, resources, volumes, and that the
ConfigMap's config is one trainrun itself accepts.
"""

import os
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
