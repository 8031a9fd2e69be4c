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
#include "../src/train/model_state.h"
#include "../src/train/train_progress.h"
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

// The values of the components a trainer has besides the model, optimizer and progress (the data
// stream's, the health monitor's), as they name them, and one more that no summary knows.
struct OtherValues final : Stateful {
  int64_t samples_seen = 0, bad_steps_total = 0, mixture_cursor = 0;
  uint64_t seed = 42;
  double lr_scale = 1.0;
  void state_dict(StateDict& out) override {
    out.put(state_name::samples_seen, samples_seen);
    out.put(state_name::seed, seed);
    out.put(state_name::bad_steps_total, bad_steps_total);
    out.put(state_name::lr_scale, lr_scale);
    out.put("data/mixture_cursor", mixture_cursor);
  }
  void load_state_dict(StateSource& in) override {
    samples_seen = read_int(in, state_name::samples_seen);
    seed = read_uint(in, state_name::seed);
    bad_steps_total = read_int(in, state_name::bad_steps_total);
    lr_scale = read_double(in, state_name::lr_scale);
    mixture_cursor = read_int(in, "data/mixture_cursor");
  }
};

// A model's worth of parameters and the optimizer that owns their moments, after one update so
// the moments are not zero; the run's progress and other values.
struct Run {
  std::unique_ptr<Communicator> comm = make_local_communicator();
  DeviceMesh mesh = DeviceMesh::flat(*comm);
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore ps{*be};
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<ModelState> model;
  TrainProgress progress;
  OtherValues other;
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
    dp = DataParallel::make(0, mesh, ps, exp.optimizer, nullptr);
    model = std::make_unique<ModelState>(ps, *dp);
    float* g = ps.grads().as<float>();
    for (int64_t i = 0; i < ps.numel(); ++i) g[i] = 0.01f * static_cast<float>(i + seed % 5);
    StepTimes t;
    dp->update(1e-2, 1, 1.0, t);
  }
  std::vector<Stateful*> components() { return {model.get(), dp.get(), &progress, &other}; }
  // The components' values as the step loop leaves them after `step` steps.
  void at(int64_t step) {
    progress.step = step;
    progress.tokens_seen = step * 100;
    other.samples_seen = step * 4;
    other.mixture_cursor = step * 3 + 1;
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

}  // namespace

// checkpoint.sharded means nothing now (every checkpoint is a folder), and a config that sets it
// still works: both values give the same layout.
TEST_CASE("checkpoint manager: saves when due, and restores weights, moments and state") {
  for (bool sharded : {false, true}) {
    CAPTURE(sharded);
    TempDir dir;
    Run a(dir.str(), sharded, 1);
    CheckpointManager m(a.exp, *a.comm, a.components());
    CHECK_FALSE(m.due(3, false));
    CHECK(m.due(4, false));
    CHECK(m.due(10, false));  // the last step
    CHECK(m.due(5, true));    // a stop request
    CHECK(m.newest().empty());

    int flushed = 0;
    a.at(4);
    a.other.lr_scale = 0.1 * 0.3;  // not exact in binary: must come back bit for bit
    a.other.seed = 0xfedcba9876543210ull;
    CHECK(m.save(4, 0, [&] { ++flushed; }) == "");
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
    CheckpointManager mb(b.exp, *b.comm, b.components());
    const TrainState st = mb.restore(m.location(4));
    CHECK(b.weights() == a.weights());
    CHECK(b.moments() == a.moments());
    // Each component got its own values back, by name.
    CHECK(b.progress.step == 4);
    CHECK(b.progress.tokens_seen == 400);
    CHECK(b.other.samples_seen == 16);
    CHECK(b.other.seed == 0xfedcba9876543210ull);
    CHECK(b.other.lr_scale == 0.1 * 0.3);
    CHECK(b.other.mixture_cursor == 13);
    // The summary, for messages: the world size is the manager's own value.
    CHECK(st.step == 4);
    CHECK(st.world_size == 1);
    CHECK(st.lr_scale == 0.1 * 0.3);
    CHECK(st.config_yaml == to_yaml(a.exp));  // the resolved config, filled in by save()
    CHECK(mb.newest() == m.location(4));
  }
}

TEST_CASE("checkpoint manager: a streak of bad steps or a non-finite weight writes nothing") {
  for (bool sharded : {false, true}) {
    CAPTURE(sharded);
    TempDir dir;
    Run a(dir.str(), sharded, 1);
    CheckpointManager m(a.exp, *a.comm, a.components());
    a.at(4);
    REQUIRE(m.save(4, 0, {}) == "");

    int flushed = 0;
    a.at(8);
    const std::string streak = m.save(8, 2, [&] { ++flushed; });
    CHECK(streak.find("the last 2 step(s) had a non-finite loss") != std::string::npos);
    CHECK(flushed == 0);  // refused before the snapshot

    a.ps.params().as<float>()[5] = NAN;
    const std::string nan = m.save(8, 0, {});
    CHECK(nan.find("non-finite") != std::string::npos);
    CHECK(m.newest() == m.location(4));  // the newest good one stays the newest
    CHECK_FALSE(fs::exists(m.location(8)));
    CHECK(list_checkpoints(dir.str()).size() == 1);
  }
}

TEST_CASE("checkpoint manager: restore refuses a checkpoint of another model") {
  TempDir dir;
  Run a(dir.str(), false, 1);
  CheckpointManager m(a.exp, *a.comm, a.components());
  a.at(4);
  REQUIRE(m.save(4, 0, {}) == "");
  Run other(dir.str(), false, 1, "v");  // the same sizes, another parameter name
  CheckpointManager mo(other.exp, *other.comm, other.components());
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
  CheckpointManager m(a.exp, *a.comm, a.components());
  a.at(4);
  REQUIRE(m.save(4, 0, {}) == "");
  a.at(8);
  REQUIRE(m.save(8, 0, {}) == "");
  CHECK(m.newest_good() == m.location(8));
  const std::string file = (fs::path(m.location(8)) / "rank-00000-of-00001.h5").string();
  fs::resize_file(file, fs::file_size(file) / 2);  // a torn file
  CHECK(m.newest_good() == m.location(4));
  fs::remove_all(m.location(4));
  CHECK_FALSE(m.newest_good().has_value());
}

TEST_CASE("checkpoint manager: a component missing its value, or another run's, is refused") {
  TempDir dir;
  Run a(dir.str(), false, 1);
  CheckpointManager m(a.exp, *a.comm, a.components());
  a.at(4);
  REQUIRE(m.save(4, 0, {}) == "");
  // A component that needs a value the checkpoint does not hold says which.
  struct Needs final : Stateful {
    void state_dict(StateDict&) override {}
    void load_state_dict(StateSource& in) override { read_int(in, "data/other_cursor"); }
  } needs;
  Run b(dir.str(), false, 2);
  std::vector<Stateful*> with = b.components();
  with.push_back(&needs);
  CheckpointManager mb(b.exp, *b.comm, with);
  CHECK_THROWS_WITH_AS(mb.restore(m.location(4)),
                       doctest::Contains("holds no value data/other_cursor"), CheckpointError);
  // A value the summary needs, of the wrong type, is refused when it is saved (here a progress
  // whose restarts count is a fraction).
  struct Fraction final : Stateful {
    void state_dict(StateDict& out) override { out.put(state_name::restarts, 0.5); }
    void load_state_dict(StateSource&) override {}
  } fraction;
  struct StepOnly final : Stateful {
    void state_dict(StateDict& out) override {
      out.put(state_name::step, int64_t{8});
      out.put(state_name::tokens_seen, int64_t{0});
    }
    void load_state_dict(StateSource&) override {}
  } step_only;
  CheckpointManager bad(a.exp, *a.comm, {a.model.get(), &step_only, &fraction, &a.other});
  CHECK_THROWS_WITH_AS(bad.save(8, 0, {}), doctest::Contains("train/restarts is 0.5"),
                       CheckpointWriteError);
  CHECK_FALSE(fs::exists(bad.location(8)));
}
