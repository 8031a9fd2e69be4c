// Kubernetes: a Kubeflow MPIJob (mpi-operator v2) whose launcher runs mpirun over worker pods.
// Fault tolerance is Kubernetes' own: a failed pod restarts the launcher (restartPolicy
// OnFailure), whose `trainrun run ... --resume` continues from the newest checkpoint on the claim.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string_view>

#include "k8s_values.h"
#include "trainrun/cluster/cluster.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"

namespace trainrun {

namespace {

constexpr const char* kConfigDir = "/config";
constexpr const char* kRunsDir = "/runs";

// A DNS-1123 label from the experiment name: lower case, [a-z0-9-], at most 63 characters.
std::string k8s_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    out += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
  }
  out = out.substr(0, 50);  // leaves room for the "-config" / "-runs" suffixes
  const auto b = out.find_first_not_of('-');
  const auto e = out.find_last_not_of('-');
  if (b == std::string::npos)
    throw ConfigError(fmt::format(
        "name '{}' has no letter or digit to name Kubernetes objects by: set `name:` in the config",
        name));
  return out.substr(b, e - b + 1);
}

struct Resolved {
  int nodes, ranks_per_node;
};

Resolved resolve(const Experiment& exp, const K8sOptions& o) {
  Resolved r{o.nodes ? o.nodes : exp.distributed.nodes,
             o.ranks_per_node ? o.ranks_per_node : exp.distributed.nproc};
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError(msg);
  };
  need(r.nodes >= 1, fmt::format("k8s --nodes {}: need at least 1 worker pod", r.nodes));
  need(r.ranks_per_node >= 1,
       fmt::format("k8s --ranks-per-node {}: need at least 1 rank per pod", r.ranks_per_node));
  need(o.gpus_per_node >= 0,
       fmt::format("k8s --gpus-per-node {}: must be 0 (no GPUs) or more", o.gpus_per_node));
  need(o.gpus_per_node == 0 || r.ranks_per_node <= o.gpus_per_node,
       fmt::format("k8s: {} ranks per pod but only {} GPUs per pod: each rank drives its own GPU; "
                   "set --ranks-per-node {} or --gpus-per-node {}",
                   r.ranks_per_node, o.gpus_per_node, o.gpus_per_node, r.ranks_per_node));
  // Every string that reaches the cluster, in the grammar the cluster reads it with.
  k8s::check_image("--image", o.image, "registry.example.com/team/trainrun:v1");
  k8s::check_dns_label("--namespace", o.namespace_, "team-a");
  if (!o.pvc.empty()) k8s::check_dns_subdomain("--pvc", o.pvc, "trainrun-runs");
  k8s::check_quantity("--cpu", o.cpu, false, "500m (half a core) or --cpu 8");
  k8s::check_quantity("--memory", o.memory, true, "64Gi");
  if (o.pvc.empty()) k8s::check_quantity("--storage", o.storage, true, "100Gi");
  return r;
}

// Kubernetes wants strings where a plain YAML scalar would read as a number, bool or null
// (`-np 16` in a command, a name like `2024`): quote those.
struct Str {
  const std::string& s;
};
YAML::Emitter& operator<<(YAML::Emitter& e, Str v) {
  std::string lower;
  for (char c : v.s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  const bool quote = v.s.empty() || std::isdigit(static_cast<unsigned char>(v.s[0])) ||
                     std::string_view("+-.").find(v.s[0]) != std::string_view::npos ||
                     std::find(std::begin(kWords), std::end(kWords), lower) != std::end(kWords);
  if (quote) e << YAML::DoubleQuoted;
  return e << v.s;
}

void metadata(YAML::Emitter& e, const std::string& name, const K8sOptions& o,
              const std::string& experiment) {  // experiment: a valid label value
  e << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << Str{name};
  e << YAML::Key << "namespace" << YAML::Value << Str{o.namespace_};
  e << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "app.kubernetes.io/name" << YAML::Value << "trainrun";
  e << YAML::Key << "trainrun/experiment" << YAML::Value << Str{experiment};
  e << YAML::EndMap << YAML::EndMap;
}

void string_list(YAML::Emitter& e, const std::vector<std::string>& v) {
  e << YAML::BeginSeq;
  for (const auto& s : v) e << Str{s};
  e << YAML::EndSeq;
}

// One replica spec (Launcher or Worker) of the MPIJob.
struct Replica {
  std::string role;  // Launcher | Worker
  int replicas;
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;
  bool limits;           // the worker's cpu/memory/GPU limits
  int metrics_port = 0;  // logging.prometheus_port, on the pods that may hold rank 0
};

// Prometheus's customary pod annotations (the kubernetes_sd_configs example relabelling reads
// them) and the named container port of the endpoint.
void metrics_annotations(YAML::Emitter& e, int port) {
  e << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "annotations" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "prometheus.io/scrape" << YAML::Value << YAML::DoubleQuoted << "true";
  e << YAML::Key << "prometheus.io/port" << YAML::Value << YAML::DoubleQuoted
    << std::to_string(port);
  e << YAML::Key << "prometheus.io/path" << YAML::Value << YAML::DoubleQuoted << "/metrics";
  e << YAML::EndMap << YAML::EndMap;
}

void replica_spec(YAML::Emitter& e, const Replica& r, const K8sOptions& o,
                  const std::string& config_map, const std::string& claim) {
  e << YAML::Key << r.role << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "replicas" << YAML::Value << r.replicas;
  e << YAML::Key << "restartPolicy" << YAML::Value << "OnFailure";
  e << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  if (r.metrics_port > 0) metrics_annotations(e, r.metrics_port);
  e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  std::string container = r.role;
  std::transform(container.begin(), container.end(), container.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  e << YAML::Key << "name" << YAML::Value << container;
  e << YAML::Key << "image" << YAML::Value << Str{o.image};
  e << YAML::Key << "imagePullPolicy" << YAML::Value << "IfNotPresent";
  e << YAML::Key << "command" << YAML::Value;
  string_list(e, r.command);
  if (r.metrics_port > 0)
    e << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap << YAML::Key
      << "name" << YAML::Value << "metrics" << YAML::Key << "containerPort" << YAML::Value
      << r.metrics_port << YAML::Key << "protocol" << YAML::Value << "TCP" << YAML::EndMap
      << YAML::EndSeq;
  if (!r.env.empty()) {
    e << YAML::Key << "env" << YAML::Value << YAML::BeginSeq;
    for (const auto& [k, v] : r.env)
      e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << k << YAML::Key << "value"
        << YAML::Value << YAML::DoubleQuoted << v << YAML::EndMap;  // env values: always strings
    e << YAML::EndSeq;
  }
  if (r.limits) {
    e << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
    if (o.gpus_per_node > 0) e << YAML::Key << "nvidia.com/gpu" << YAML::Value << o.gpus_per_node;
    e << YAML::Key << "cpu" << YAML::Value << Str{o.cpu};
    e << YAML::Key << "memory" << YAML::Value << Str{o.memory};
    e << YAML::EndMap << YAML::EndMap;
  }
  e << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq;
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "config" << YAML::Key << "mountPath"
    << YAML::Value << kConfigDir << YAML::Key << "readOnly" << YAML::Value << true << YAML::EndMap;
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "runs" << YAML::Key << "mountPath"
    << YAML::Value << kRunsDir << YAML::EndMap;
  e << YAML::EndSeq;
  e << YAML::EndMap << YAML::EndSeq;  // the container, containers
  e << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq;
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "config" << YAML::Key << "configMap"
    << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << config_map
    << YAML::EndMap << YAML::EndMap;
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "runs" << YAML::Key
    << "persistentVolumeClaim" << YAML::Value << YAML::BeginMap << YAML::Key << "claimName"
    << YAML::Value << Str{claim} << YAML::EndMap << YAML::EndMap;
  e << YAML::EndSeq;
  e << YAML::EndMap << YAML::EndMap << YAML::EndMap;  // spec, template, replica
}

std::string finish(const YAML::Emitter& e) {
  if (!e.good()) throw std::logic_error("k8s manifest emitter: " + e.GetLastError());
  return std::string("---\n") + e.c_str() + "\n";
}

}  // namespace

std::string k8s_manifest(const Experiment& exp_in, const K8sOptions& o) {
  const Resolved r = resolve(exp_in, o);
  const int world = r.nodes * r.ranks_per_node;
  validate_for_world(exp_in, world);
  Experiment exp = exp_in;
  exp.distributed.nodes = r.nodes;
  exp.distributed.nproc = r.ranks_per_node;
  exp.run_dir = fmt::format("{}/{}", kRunsDir, exp.name);
  const std::string name = k8s_name(exp.name);
  const std::string config_map = name + "-config";
  const std::string claim = o.pvc.empty() ? name + "-runs" : o.pvc;

  std::string out;
  {
    YAML::Emitter e;
    e << YAML::BeginMap;
    e << YAML::Key << "apiVersion" << YAML::Value << "v1";
    e << YAML::Key << "kind" << YAML::Value << "ConfigMap";
    metadata(e, config_map, o, name);
    e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "config.yaml" << YAML::Value << YAML::Literal << to_yaml(exp);
    e << YAML::EndMap << YAML::EndMap;
    out += finish(e);
  }
  if (o.pvc.empty()) {
    // Every worker writes into the run directory (rank 0 the checkpoints, each rank its log):
    // the claim must be mountable on several nodes at once.
    YAML::Emitter e;
    e << YAML::BeginMap;
    e << YAML::Key << "apiVersion" << YAML::Value << "v1";
    e << YAML::Key << "kind" << YAML::Value << "PersistentVolumeClaim";
    metadata(e, claim, o, name);
    e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "accessModes" << YAML::Value;
    string_list(e, {"ReadWriteMany"});
    e << YAML::Key << "resources" << YAML::Value << YAML::BeginMap << YAML::Key << "requests"
      << YAML::Value << YAML::BeginMap << YAML::Key << "storage" << YAML::Value << Str{o.storage}
      << YAML::EndMap << YAML::EndMap;
    e << YAML::EndMap << YAML::EndMap;
    out += finish(e);
  }
  {
    YAML::Emitter e;
    e << YAML::BeginMap;
    e << YAML::Key << "apiVersion" << YAML::Value << "kubeflow.org/v2beta1";
    e << YAML::Key << "kind" << YAML::Value << "MPIJob";
    metadata(e, name, o, name);
    e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "slotsPerWorker" << YAML::Value << r.ranks_per_node;
    e << YAML::Key << "mpiImplementation" << YAML::Value << "OpenMPI";
    e << YAML::Key << "sshAuthMountPath" << YAML::Value << "/root/.ssh";
    e << YAML::Key << "runPolicy" << YAML::Value << YAML::BeginMap;
    // Each launcher restart resumes from the newest checkpoint, so retries lose little.
    e << YAML::Key << "backoffLimit" << YAML::Value
      << (exp.fault_tolerance.max_restarts > 0 ? exp.fault_tolerance.max_restarts : 6);
    e << YAML::Key << "cleanPodPolicy" << YAML::Value << "Running";
    e << YAML::EndMap;
    e << YAML::Key << "mpiReplicaSpecs" << YAML::Value << YAML::BeginMap;
    const std::vector<std::pair<std::string, std::string>> root_env = {
        {"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
    replica_spec(e,
                 {"Launcher",
                  1,
                  {"mpirun", "-np", std::to_string(world), "--bind-to", "none", "trainrun", "run",
                   std::string(kConfigDir) + "/config.yaml", "--resume"},
                  root_env,
                  false},
                 o, config_map, claim);
    // Workers only host the ranks mpirun starts over ssh; rank 0, and with it the metrics
    // endpoint, runs on the first of them.
    replica_spec(
        e, {"Worker", r.nodes, {"/usr/sbin/sshd", "-De"}, {}, true, exp.logging.prometheus_port}, o,
        config_map, claim);
    e << YAML::EndMap;  // mpiReplicaSpecs
    e << YAML::EndMap << YAML::EndMap;
    out += finish(e);
  }
  return out;
}

}  // namespace trainrun
