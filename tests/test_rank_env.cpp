// The rank side of launching: the local communicator, detecting a rank started by mpirun,
// srun or PMI, and each rank's share of the cores.

#include "launch_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::launch_test;

TEST_CASE("local communicator: one rank, collectives are the identity") {
  auto c = make_local_communicator();
  CHECK(c->kind() == "local");
  CHECK(c->size() == 1);
  CHECK(c->rank() == 0);
  CHECK(c->local_size() == 1);
  CHECK_FALSE(c->host().empty());
  float x[3] = {1.5f, -2.0f, 3.0f};
  Tensor t(x, DType::f32, Device::cpu, {3});
  c->allreduce_sum(t);
  c->allreduce_avg(t);
  c->reduce_scatter_sum(t);
  c->all_gather(t);
  c->ireduce_scatter_sum(t)->wait();
  CHECK(c->iallreduce_sum(t)->test());
  CHECK(x[0] == 1.5f);
  CHECK(x[1] == -2.0f);
  const double in[2] = {4.0, 5.0};
  double out[2] = {0, 0};
  c->all_gather_doubles(in, 2, out);
  CHECK(out[0] == 4.0);
  CHECK(out[1] == 5.0);
  CHECK_THROWS_AS(c->broadcast(t, 1), std::invalid_argument);
}

TEST_CASE("detect_rank_env") {
  EnvGuard g;
  clear_rank_vars(g);

  SUBCASE("nothing set: the launcher, not a rank") {
    RankEnv e = detect_rank_env();
    CHECK_FALSE(e.is_rank);
    CHECK(e.launcher.empty());
    CHECK(e.size == 1);
  }
  SUBCASE("Open MPI's mpirun") {
    g.set("OMPI_COMM_WORLD_SIZE", "4");
    g.set("OMPI_COMM_WORLD_RANK", "3");
    g.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    g.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    g.set("SLURM_JOB_ID", "17");  // mpirun inside an allocation: still Open MPI's rank
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "openmpi");
    CHECK(e.rank == 3);
    CHECK(e.size == 4);
    CHECK(e.local_rank == 1);
    CHECK(e.local_size == 2);
  }
  SUBCASE("srun job step") {
    g.set("SLURM_JOB_ID", "17");
    g.set("SLURM_STEP_ID", "0");
    g.set("SLURM_PROCID", "5");
    g.set("SLURM_NTASKS", "6");
    g.set("SLURM_STEP_NUM_TASKS", "6");
    g.set("SLURM_LOCALID", "1");
    g.set("SLURM_NODEID", "2");
    g.set("SLURM_STEP_TASKS_PER_NODE", "2(x2),3");
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "slurm");
    CHECK(e.rank == 5);
    CHECK(e.size == 6);
    CHECK(e.local_rank == 1);
    CHECK(e.local_size == 3);
  }
  SUBCASE("sbatch's batch shell is not a rank") {
    g.set("SLURM_JOB_ID", "17");
    g.set("SLURM_PROCID", "0");
    g.set("SLURM_NTASKS", "4");
    g.set("SLURM_LOCALID", "0");
    CHECK_FALSE(detect_rank_env().is_rank);
    g.set("SLURM_STEP_ID", "4294967291");  // Slurm's id for the batch script itself
    CHECK_FALSE(detect_rank_env().is_rank);
  }
  SUBCASE("PMI (Hydra)") {
    g.set("PMI_RANK", "1");
    g.set("PMI_SIZE", "2");
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "pmi");
    CHECK(e.rank == 1);
    CHECK(e.size == 2);
  }
  SUBCASE("garbage is not a rank") {
    g.set("OMPI_COMM_WORLD_SIZE", "two");
    g.set("OMPI_COMM_WORLD_RANK", "1");
    CHECK_FALSE(detect_rank_env().is_rank);
  }
}

TEST_CASE("default_omp_threads") {
  EnvGuard g;
  g.set("OMP_NUM_THREADS", "3");
  CHECK(default_omp_threads(2) == 3);
  g.unset("OMP_NUM_THREADS");
  CHECK(default_omp_threads(1) >= 1);
  CHECK(default_omp_threads(1) <= static_cast<int>(std::thread::hardware_concurrency()));
  CHECK(default_omp_threads(100000) == 1);
}
