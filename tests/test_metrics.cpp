// Metrics logs: rows read back from metrics.jsonl and metrics.h5, NaN-aligned columns, resume
// truncation in both files, readable by another process after flush(), strings only in JSONL.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "temp_dir.h"
#include "trainrun/obs/metrics.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

using trainrun::testing::TempDir;

// Reads one column of metrics.h5 (the writer must have closed or flushed it).
std::vector<double> h5_column(const std::string& run_dir, const std::string& name) {
  std::string file = (fs::path(run_dir) / "metrics.h5").string();
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  std::vector<double> out;
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) {
    hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space, &n, nullptr);
    out.resize(n);
    if (n) REQUIRE(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
    H5Sclose(space);
    H5Dclose(ds);
  } else {
    out.push_back(-12345);  // marks "no such dataset"
  }
  H5Fclose(f);
  return out;
}

bool h5_has(const std::string& run_dir, const std::string& name) {
  return h5_column(run_dir, name) != std::vector<double>{-12345};
}

// Equality that treats NaN == NaN, for columns with NaN fill.
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

double num(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) return std::get<double>(v);
  FAIL("missing field " << key);
  return 0;
}

std::vector<double> steps_of(const std::vector<MetricRow>& rows) {
  std::vector<double> out;
  for (const MetricRow& r : rows) out.push_back(num(r, "step"));
  return out;
}

std::vector<double> iota(int from, int to) {
  std::vector<double> v;
  for (int i = from; i <= to; ++i) v.push_back(i);
  return v;
}

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("rows read back from both files with NaN-aligned columns") {
  TempDir dir;
  const double third = 1.0 / 3.0;
  {
    MetricsLog log(dir.str(), -1);
    log.append("train", {{"step", 1.0}, {"loss", 2.0}, {"lr", 1e-300}});
    log.append("train", {{"step", 2.0}, {"loss", third}, {"grad_norm", 0.1}});  // new field
    log.append("train", {{"step", 3.0}, {"grad_norm", kNaN}, {"lr", 3e-4}});    // loss absent
    log.append("eval", {{"step", 3.0}, {"val_loss", 1.75}});
    log.append("event", {{"step", 3.0},
                         {"cause", std::string("loss is \"nan\"\n\ton rank\\3 \x01")},
                         {"rank", 3.0}});
  }
  auto train = read_metrics_jsonl(dir.str(), "train");
  REQUIRE(train.size() == 3);
  CHECK(train[0].front().first == "step");  // fields in the order appended
  CHECK(train[0][1].first == "loss");
  CHECK(num(train[1], "loss") == third);  // doubles round-trip exactly
  CHECK(num(train[0], "lr") == 1e-300);
  CHECK(std::isnan(num(train[2], "grad_norm")));  // NaN written as null, read back as NaN

  auto events = read_metrics_jsonl(dir.str(), "event");
  REQUIRE(events.size() == 1);
  CHECK(std::get<std::string>(events[0][1].second) == "loss is \"nan\"\n\ton rank\\3 \x01");
  CHECK(read_metrics_jsonl(dir.str(), "eval").size() == 1);

  std::ifstream in(dir.path / "metrics.jsonl");
  std::string first;
  std::getline(in, first);
  CHECK(first == R"({"kind":"train","step":1,"loss":2,"lr":1e-300})");

  CHECK(same(h5_column(dir.str(), "/train/step"), {1, 2, 3}));
  CHECK(same(h5_column(dir.str(), "/train/loss"), {2.0, third, kNaN}));
  CHECK(same(h5_column(dir.str(), "/train/grad_norm"), {kNaN, 0.1, kNaN}));
  CHECK(same(h5_column(dir.str(), "/train/lr"), {1e-300, kNaN, 3e-4}));
  CHECK(same(h5_column(dir.str(), "/eval/val_loss"), {1.75}));
  CHECK(same(h5_column(dir.str(), "/event/rank"), {3}));
  CHECK_FALSE(h5_has(dir.str(), "/event/cause"));  // strings only in the JSONL
}

TEST_CASE("many rows are batched without losing any") {
  TempDir dir;
  {
    MetricsLog log(dir.str(), -1);
    for (int s = 1; s <= 2500; ++s) {
      MetricRow row{{"step", double(s)}, {"loss", 1.0 / s}};
      if (s % 1000 == 0) row.emplace_back("tokens_per_s", 5.0 * s);
      log.append("train", row);
    }
  }
  std::vector<double> loss = h5_column(dir.str(), "/train/loss");
  REQUIRE(loss.size() == 2500);
  CHECK(loss[1999] == 1.0 / 2000);
  std::vector<double> tps = h5_column(dir.str(), "/train/tokens_per_s");
  REQUIRE(tps.size() == 2500);
  CHECK(tps[999] == 5000.0);
  CHECK(std::isnan(tps[1000]));
  CHECK(read_metrics_jsonl(dir.str(), "train").size() == 2500);
}

TEST_CASE("resume drops rows past the checkpoint step in both files") {
  TempDir dir;
  {
    MetricsLog log(dir.str(), -1);
    for (int s = 1; s <= 10; ++s) {
      log.append("train", {{"step", double(s)}, {"loss", 10.0 - s}});
      if (s % 5 == 0) log.append("eval", {{"step", double(s)}, {"val_loss", 9.0 - s}});
      if (s == 7) log.append("event", {{"step", 7.0}, {"cause", std::string("spike")}});
    }
  }
  {
    MetricsLog log(dir.str(), 6);
    log.append("train", {{"step", 7.0}, {"loss", 0.5}});
  }
  CHECK(same(steps_of(read_metrics_jsonl(dir.str(), "train")), iota(1, 7)));
  CHECK(same(steps_of(read_metrics_jsonl(dir.str(), "eval")), {5}));
  CHECK(read_metrics_jsonl(dir.str(), "event").empty());
  CHECK(same(h5_column(dir.str(), "/train/step"), iota(1, 7)));
  CHECK(h5_column(dir.str(), "/train/loss").back() == 0.5);
  CHECK(same(h5_column(dir.str(), "/eval/step"), {5}));
  CHECK(same(h5_column(dir.str(), "/eval/val_loss"), {4}));
  CHECK(same(h5_column(dir.str(), "/event/step"), {}));

  SUBCASE("a damaged metrics.h5 is rebuilt from the JSONL") {
    { std::ofstream(dir.path / "metrics.h5", std::ios::trunc) << "not hdf5"; }
    { MetricsLog log(dir.str(), 3); }
    CHECK(same(h5_column(dir.str(), "/train/step"), iota(1, 3)));
    CHECK(same(h5_column(dir.str(), "/train/loss"), {9, 8, 7}));
    CHECK(same(steps_of(read_metrics_jsonl(dir.str(), "train")), iota(1, 3)));
  }
  SUBCASE("a fresh start empties both files") {
    { MetricsLog log(dir.str(), -1); }
    CHECK(read_metrics_jsonl(dir.str(), "train").empty());
    CHECK_FALSE(h5_has(dir.str(), "/train/step"));
  }
}

TEST_CASE("another process reads both files after flush while the run goes on") {
  TempDir dir;
  MetricsLog log(dir.str(), -1);
  std::string h5 = (dir.path / "metrics.h5").string();
  std::string cmd = "h5dump -d /train/loss " + h5 + " 2>&1";
  for (int s = 1; s <= 3; ++s) log.append("train", {{"step", double(s)}, {"loss", 0.25 * s}});
  log.flush();
  int rc = -1;
  std::string out = run(cmd, &rc);
  CHECK_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("SIMPLE { ( 3 ) / ( H5S_UNLIMITED ) }") != std::string::npos, out);
  CHECK_MESSAGE(out.find("0.25, 0.5, 0.75") != std::string::npos, out);
  CHECK(read_metrics_jsonl(dir.str(), "train").size() == 3);

  log.append("train", {{"step", 4.0}, {"loss", 1.0}});
  log.flush();
  out = run(cmd, &rc);
  CHECK_MESSAGE(rc == 0, out);
  CHECK_MESSAGE(out.find("SIMPLE { ( 4 ) / ( H5S_UNLIMITED ) }") != std::string::npos, out);
  CHECK(read_metrics_jsonl(dir.str(), "train").size() == 4);
}

TEST_CASE("every metric event has one name, found back from it, first in its row") {
  for (size_t i = 0; i < enum_names<MetricEvent>().size(); ++i) {
    const auto e = static_cast<MetricEvent>(i);
    CHECK(enum_from_name<MetricEvent>(enum_name(e)) == e);
    const MetricRow row = event_row(7, e);
    REQUIRE(row.size() == 2);
    CHECK(row[0].first == "step");
    CHECK(std::get<double>(row[0].second) == 7.0);
    CHECK(std::get<std::string>(row[1].second) == enum_name(e));
  }
  CHECK_FALSE(enum_from_name<MetricEvent>("bad-step").has_value());
}
