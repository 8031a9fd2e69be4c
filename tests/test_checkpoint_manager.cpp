// CheckpointManager (src/train/checkpoint_manager.h): the step loop's one checkpoint component,
// on one rank and a local communicator: the layouts, the refusals, restore and newest_good.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../src/train/checkpoint_manager.h"
#include "../src/train/data_parallel.h"
#include "temp_dir.h"
#include "trainrun/backend/backend.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/comm.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"

using namespace trainrun;
using trainrun::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// A model's worth of parameters and the optimizer that owns their moments, after one update so
// the moments are not zero.
struct Run {
  std::unique_ptr<Communicator> comm = make_local_communicator();
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore ps{*be};
  std::unique_ptr<DataParallel> dp;
  Experiment exp;

  Run(const std::string& run_dir, bool sharded, uint64_t seed, const std::string& extra = "w") {
    exp.run_dir = run_dir;
    exp.train.steps = 10;
    exp.checkpoint.every = 4;
    exp.checkpoint.keep_last = 3;
    exp.checkpoint.async = false;
    exp.checkpoint.sharded = sharded;
    ps.declare(extra, {3, 4}, Init::normal, 0.5f, true);
    ps.declare("b", {4}, Init::zeros, 0.0f, false);
    ps.allocate();
    ps.initialize(seed);
    dp = DataParallel::make(false, *comm, *comm, ps, exp.optimizer, nullptr);
    float* g = ps.grads().as<float>();
    for (int64_t i = 0; i < ps.numel(); ++i) g[i] = 0.01f * static_cast<float>(i + seed % 5);
    StepTimes t;
    dp->update(1e-2, 1, 1.0, t);
  }
  std::vector<float> weights() const {
    const float* p = ps.params().as<float>();
    return std::vector<float>(p, p + ps.numel());
  }
  // Every moment the optimizer holds, as its state_dict writes them (one rank: all of them).
  std::vector<float> moments() {
    StateDict sd;
    dp->state_dict(sd);
    RankSnapshot snap;
    take_snapshot(sd, &snap);
    return std::vector<float>(snap.data.begin(), snap.data.end());
  }
};

TrainState state_at(int64_t step) {
  TrainState st;
  st.step = step;
  st.tokens_seen = step * 100;
  st.samples_seen = step * 4;
  st.seed = 42;
  return st;
}

}  // namespace

// checkpoint.sharded means nothing now (every checkpoint is a folder), and a config that sets it
// still works: both values give the same layout.
TEST_CASE("checkpoint manager: saves when due, and restores weights, moments and state") {
  for (bool sharded : {false, true}) {
    CAPTURE(sharded);
    TempDir dir;
    Run a(dir.str(), sharded, 1);
    CheckpointManager m(a.exp, *a.comm, *a.be, a.ps, *a.dp);
    CHECK_FALSE(m.due(3, false));
    CHECK(m.due(4, false));
    CHECK(m.due(10, false));  // the last step
    CHECK(m.due(5, true));    // a stop request
    CHECK(m.newest().empty());

    int flushed = 0;
    CHECK(m.save(state_at(4), 0, [&] { ++flushed; }) == "");
    CHECK(flushed == 1);
    CHECK(m.newest() == m.location(4));
    CHECK(m.location(4) == checkpoint_path(dir.str(), 4));
    CHECK(fs::is_directory(m.location(4)));
    CHECK(verify_checkpoint(m.location(4)).ok);

    // A fresh model, other weights, restores the saved ones exactly.
    Run b(dir.str(), sharded, 2);
    REQUIRE(b.weights() != a.weights());
    REQUIRE(b.moments() != a.moments());
    REQUIRE(!a.moments().empty());
    CheckpointManager mb(b.exp, *b.comm, *b.be, b.ps, *b.dp);
    const TrainState st = mb.restore(m.location(4));
    CHECK(b.weights() == a.weights());
    CHECK(b.moments() == a.moments());
    CHECK(st.step == 4);
    CHECK(st.tokens_seen == 400);
    CHECK(st.world_size == 1);
    CHECK(st.config_yaml == to_yaml(a.exp));  // the resolved config, filled in by save()
    CHECK(mb.newest() == m.location(4));
  }
}

TEST_CASE("checkpoint manager: a streak of bad steps or a non-finite weight writes nothing") {
  for (bool sharded : {false, true}) {
    CAPTURE(sharded);
    TempDir dir;
    Run a(dir.str(), sharded, 1);
    CheckpointManager m(a.exp, *a.comm, *a.be, a.ps, *a.dp);
    REQUIRE(m.save(state_at(4), 0, {}) == "");

    int flushed = 0;
    const std::string streak = m.save(state_at(8), 2, [&] { ++flushed; });
    CHECK(streak.find("the last 2 step(s) had a non-finite loss") != std::string::npos);
    CHECK(flushed == 0);  // refused before the snapshot

    a.ps.params().as<float>()[5] = NAN;
    const std::string nan = m.save(state_at(8), 0, {});
    CHECK(nan.find("non-finite") != std::string::npos);
    CHECK(m.newest() == m.location(4));  // the newest good one stays the newest
    CHECK_FALSE(fs::exists(m.location(8)));
    CHECK(list_checkpoints(dir.str()).size() == 1);
  }
}

TEST_CASE("checkpoint manager: restore refuses a checkpoint of another model") {
  TempDir dir;
  Run a(dir.str(), false, 1);
  CheckpointManager m(a.exp, *a.comm, *a.be, a.ps, *a.dp);
  REQUIRE(m.save(state_at(4), 0, {}) == "");
  Run other(dir.str(), false, 1, "v");  // the same sizes, another parameter name
  CheckpointManager mo(other.exp, *other.comm, *other.be, other.ps, *other.dp);
  const std::vector<float> before = other.weights();
  CHECK_THROWS_WITH_AS(mo.restore(m.location(4)),
                       doctest::Contains("does not match the model: it holds no tensor model/v"),
                       CheckpointError);
  CHECK(other.weights() == before);  // nothing loaded
  CHECK(mo.newest().empty());
}

TEST_CASE("checkpoint manager: newest_good skips a damaged newer checkpoint") {
  TempDir dir;
  Run a(dir.str(), false, 1);
  CheckpointManager m(a.exp, *a.comm, *a.be, a.ps, *a.dp);
  REQUIRE(m.save(state_at(4), 0, {}) == "");
  REQUIRE(m.save(state_at(8), 0, {}) == "");
  CHECK(m.newest_good() == m.location(8));
  const std::string file = (fs::path(m.location(8)) / "rank-00000-of-00001.h5").string();
  fs::resize_file(file, fs::file_size(file) / 2);  // a torn file
  CHECK(m.newest_good() == m.location(4));
  fs::remove_all(m.location(4));
  CHECK_FALSE(m.newest_good().has_value());
}
