// Cluster: Slurm batch scripts and Kubernetes (Kubeflow MPIJob) manifests for an experiment.
// The generated script resumes from the run directory's newest good checkpoint whenever the
// job (re)starts, forwards Slurm's early-warning signal to every rank, and requeues itself when
// trainrun exits with 75 ("checkpointed, resume me").
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

struct SlurmOptions {
  int nodes = 0;            // 0: the config's distributed.nodes
  int ntasks_per_node = 0;  // 0: the config's distributed.nproc
  int gpus_per_node = 0;
  int cpus_per_task = 0;  // 0: not set
  std::string time;       // e.g. 24:00:00; empty: the partition's default
  std::string partition;
  std::string account;
  int signal_seconds = 300;       // early warning before the time limit
  std::string launcher = "srun";  // srun | mpirun
  std::string trainrun_bin;       // absolute path of the trainrun binary the job runs
  std::string config_path;        // absolute path of the (resolved) config the job runs
  std::vector<std::string> sets;  // --set overrides the job passes to trainrun
  // A job array (`trainrun sweep --slurm`): task i trains array[i], its run directory with its
  // own --set overrides after `sets`, instead of the experiment's run directory; at most
  // array_throttle tasks at once (0: no bound). Each task checkpoints, requeues and restarts as
  // a single job does.
  struct ArrayTask {
    std::string run_dir;            // absolute
    std::vector<std::string> sets;  // the point's overrides
  };
  std::vector<ArrayTask> array;
  int array_throttle = 0;
  std::string job_name;  // "" = the experiment's name
  std::string output;    // sbatch --output; "" = RUN_DIR/slurm-%j.out (an array: needed)
};

// The sbatch script text (readable, commented). Throws ConfigError for impossible options.
std::string slurm_script(const Experiment& exp, const SlurmOptions& opts);

// Writes RUN_DIR/config.submitted.yaml and RUN_DIR/job.sbatch, runs `sbatch --parsable` on it
// and returns the job id. Throws LaunchError when sbatch is missing or refuses.
std::string slurm_submit(const Experiment& exp, SlurmOptions opts);
// Throws LaunchError when sbatch cannot run here, saying what to do `instead`; before anything
// is written.
void require_sbatch(const std::string& instead);
// `sbatch --parsable SCRIPT`: the job id. Throws LaunchError when sbatch refuses.
std::string sbatch_submit(const std::string& script);

struct K8sOptions {
  int nodes = 0;  // worker pods; 0: the config's distributed.nodes
  int gpus_per_node = 0;
  int ranks_per_node = 0;  // 0: the config's distributed.nproc
  std::string image = "trainrun:latest";
  std::string namespace_ = "default";
  std::string pvc = "";           // existing PersistentVolumeClaim for runs/; empty: create one
  std::string storage = "100Gi";  // size of the claim created when pvc is empty
  std::string cpu = "8";
  std::string memory = "64Gi";
};

// A multi-document YAML: ConfigMap (the resolved config), PersistentVolumeClaim (unless
// opts.pvc names one) and a kubeflow.org/v2beta1 MPIJob with a launcher and workers.
std::string k8s_manifest(const Experiment& exp, const K8sOptions& opts);

}  // namespace trainrun
