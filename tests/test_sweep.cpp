// The sweep's points from its axes (src/sweep/sweep_points.h): the product's order, zipped
// lists, seeds innermost, values split only at top-level commas, random draws fixed by the
// sweep seed and inside their bounds, names readable and unique; and the manifest's round trip.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "../src/sweep/sweep_points.h"
#include "trainrun/core/errors.h"
#include "trainrun/report/sweep_manifest.h"

using namespace trainrun;
using trainrun::sweep::Axes;
using trainrun::sweep::expand;

namespace {
std::vector<std::string> names(const std::vector<sweep::Point>& pts) {
  std::vector<std::string> out;
  for (const auto& p : pts) out.push_back(p.name);
  return out;
}
}  // namespace

TEST_CASE("sweep: the grid's product, first axis outermost, seeds innermost") {
  Axes a;
  a.grid = {"optimizer.lr=1e-3,3e-3", "model.n_layer=2,4"};
  a.seeds = 2;
  const auto pts = expand(a, 10);
  REQUIRE(pts.size() == 8);
  CHECK(pts[0].overrides ==
        std::vector<std::string>{"optimizer.lr=1e-3", "model.n_layer=2", "seed=10"});
  CHECK(pts[1].overrides.back() == "seed=11");
  CHECK(pts[2].overrides[1] == "model.n_layer=4");
  CHECK(pts[4].overrides[0] == "optimizer.lr=3e-3");
  CHECK(pts[7].name == "lr-3e-3_n_layer-4_seed-11");
  const std::vector<std::string> all = names(pts);
  CHECK(std::set<std::string>(all.begin(), all.end()).size() == 8);
}

TEST_CASE("sweep: --list zips; values split at top-level commas only") {
  Axes a;
  a.list = true;
  a.grid = {"data.mix=[a,b],[c]", "seed=1,2"};
  const auto pts = expand(a, 0);
  REQUIRE(pts.size() == 2);
  CHECK(pts[0].overrides == std::vector<std::string>{"data.mix=[a,b]", "seed=1"});
  CHECK(pts[1].overrides == std::vector<std::string>{"data.mix=[c]", "seed=2"});
  // Unsafe characters become '_' in the name; the overrides keep the value whole.
  CHECK(pts[0].name == "mix-_a_b__seed-1");
  Axes q;
  q.grid = {"name='a,b',c"};
  CHECK(expand(q, 0).size() == 2);
  a.grid = {"seed=1,2", "optimizer.lr=1e-3"};
  CHECK_THROWS_WITH_AS(expand(a, 0), doctest::Contains("zip value by value"), ConfigError);
}

TEST_CASE("sweep: names stay unique: full keys for shared last components, else a hash") {
  Axes a;
  a.grid = {"model.dropout=0,0.1", "data.dropout=0,0.2"};
  const auto pts = expand(a, 0);
  CHECK(pts[1].name == "model.dropout-0_data.dropout-0.2");
  Axes b;
  b.grid = {"name=a/b,a_b"};  // both sanitise to name-a_b
  const auto two = expand(b, 0);
  CHECK(two[0].name != two[1].name);
  CHECK(two[0].name.rfind("name-a_b-", 0) == 0);
  CHECK(expand(b, 0)[0].name == two[0].name);  // the same on every run
}

TEST_CASE("sweep: random axes: fixed by the sweep seed, inside their bounds") {
  Axes a;
  a.random = {"optimizer.lr=loguniform(1e-4,1e-2)", "train.batch_size=choice(8,16,32)",
              "model.dropout=uniform(0,0.5)"};
  a.trials = 50;
  a.sweep_seed = 3;
  const auto pts = expand(a, 0);
  REQUIRE(pts.size() == 50);
  std::set<std::string> batch;
  for (const auto& p : pts) {
    const double lr = std::strtod(p.overrides[0].c_str() + 13, nullptr);
    CHECK(lr >= 1e-4);
    CHECK(lr <= 1e-2);
    batch.insert(p.overrides[1]);
    const double d = std::strtod(p.overrides[2].c_str() + 14, nullptr);
    CHECK(d >= 0);
    CHECK(d < 0.5);
  }
  CHECK(batch.size() == 3);
  CHECK(names(expand(a, 0)) == names(pts));
  a.sweep_seed = 4;
  CHECK(names(expand(a, 0)) != names(pts));
}

TEST_CASE("sweep: bad axes are refused with the fix") {
  auto refused = [](std::vector<std::string> grid, std::vector<std::string> random, int trials,
                    const char* says) {
    Axes a;
    a.grid = std::move(grid);
    a.random = std::move(random);
    a.trials = trials;
    CHECK_THROWS_WITH_AS(expand(a, 0), doctest::Contains(says), ConfigError);
  };
  refused({}, {}, 0, "nothing to sweep");
  refused({"optimizer.lr"}, {}, 0, "want KEY=VALUES");
  refused({"=1,2"}, {}, 0, "want KEY=VALUES");
  refused({"seed="}, {}, 0, "an empty grid");
  refused({"seed=1,,2"}, {}, 0, "an empty value");
  refused({}, {"seed=gauss(0,1)"}, 0, "unknown distribution");
  refused({}, {"optimizer.lr=loguniform(1,0.5)"}, 0, "want A < B");
  refused({}, {"optimizer.lr=uniform(0,x)"}, 0, "not a finite number");
  refused({"seed=1"}, {}, 3, "give --random axes");
}

TEST_CASE("sweep manifest: written durably and read back; a damaged one is exit 73") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("trainrun-manifest-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SweepManifest m{"/x/c.yaml", {"train.steps=3"}, "--grid seed=1,2", {}};
  m.points.push_back({"seed-1", {"seed=1"}, PointStatus::failed, 9, 1});
  m.points.push_back({"seed-2", {"seed=2"}});
  write_sweep_manifest(dir.string(), m);
  CHECK(is_sweep_dir(dir.string()));
  const SweepManifest r = read_sweep_manifest(dir.string());
  CHECK(r.config == m.config);
  CHECK(r.sets == m.sets);
  REQUIRE(r.points.size() == 2);
  CHECK(r.points[0].status == PointStatus::failed);
  CHECK(r.points[0].exit_code == 9);
  CHECK(r.points[1].status == PointStatus::pending);
  for (const char* bad : {"{", "[]",
                          R"({"config":"c","sets":[],"points":[{"name":"../x",)"
                          R"("overrides":[],"status":"done"}]})",
                          R"({"config":"c","sets":[],"points":[{"name":"a","overrides":[],)"
                          R"("status":"gone"}]})"}) {
    CAPTURE(bad);
    FILE* f = std::fopen((dir / kSweepManifestFile).c_str(), "w");
    std::fputs(bad, f);
    std::fclose(f);
    try {
      read_sweep_manifest(dir.string());
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == kExitRunDir);
    }
  }
  std::filesystem::remove_all(dir);
}
