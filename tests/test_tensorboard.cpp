// TensorBoard event files: CRC-32C against published check values, each protocol-buffer field
// and whole Events against the bytes the real protobuf library produces for the same messages
// (tensorboard's event_pb2, serialised once and pasted here), TFRecord framing, and the writer's
// files: one per writer, cut back on resume so that no step is written twice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "temp_dir.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/obs/tb_events.h"
#include "trainrun/obs/tensorboard.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

using trainrun::testing::TempDir;

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += char(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One decoded Event: its step and, per tag, the scalar or the text.
struct Decoded {
  int64_t step = 0;
  bool file_version = false, session_start = false;
  std::map<std::string, float> scalars;
  std::map<std::string, std::string> texts;
};

Decoded decode(std::string_view event) {
  Decoded d;
  tb::ProtoReader r(event);
  while (auto f = r.next()) {
    if (f->number == 2) d.step = static_cast<int64_t>(f->value);
    if (f->number == 3) d.file_version = true;
    if (f->number == 7) d.session_start = true;
    if (f->number != 5) continue;
    tb::ProtoReader summary(f->data);
    while (auto v = summary.next()) {
      tb::ProtoReader value(v->data);
      std::string tag;
      while (auto x = value.next()) {
        if (x->number == 1) tag = std::string(x->data);
        if (x->number == 2) {
          const auto bits = static_cast<uint32_t>(x->value);
          float fv = 0;
          std::memcpy(&fv, &bits, 4);
          d.scalars[tag] = fv;
        }
        if (x->number == 8) {
          tb::ProtoReader tensor(x->data);
          while (auto t = tensor.next())
            if (t->number == 8) d.texts[tag] = std::string(t->data);
        }
      }
      REQUIRE(value.ok());
    }
    REQUIRE(summary.ok());
  }
  REQUIRE(r.ok());
  return d;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Every event of every file in dir, in file-name order (as TensorBoard reads them).
std::vector<Decoded> read_dir(const fs::path& dir) {
  std::vector<Decoded> out;
  for (const fs::path& f : event_files(dir)) {
    CHECK(f.filename().string().rfind("events.out.tfevents.", 0) == 0);
    const std::string bytes = slurp(f);
    const tb::RecordScan scan = tb::scan_tfrecords(bytes);
    CHECK(scan.valid_bytes == bytes.size());
    REQUIRE_FALSE(scan.records.empty());
    CHECK(decode(scan.records.front()).file_version);  // every file starts with its header
    for (std::string_view r : scan.records) out.push_back(decode(r));
  }
  return out;
}

MetricRow train_row(int64_t step) {
  return {{"step", double(step)}, {"loss", 10.0 - 0.5 * double(step)}, {"lr", 1e-3}};
}

}  // namespace

TEST_CASE("CRC-32C: the published check values, continued, and TFRecord's mask") {
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720 B.4
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += char(i);
  CHECK(crc32c(ascending) == 0x46DD794Eu);
  CHECK(crc32c("6789", crc32c("12345")) == 0xE3069283u);
  CHECK(masked_crc32c("123456789") == 0xc78ab0e5u);  // tensorboard's masked_crc32c
}

TEST_CASE("protocol-buffer fields, each against its known bytes") {
  auto one = [](auto&& write) {
    tb::ProtoWriter w;
    write(w);
    return hex(w.str());
  };
  CHECK(one([](auto& w) { w.varint(1, 0); }) == "0800");
  CHECK(one([](auto& w) { w.varint(2, 300); }) == "10ac02");
  CHECK(one([](auto& w) { w.varint(2, uint64_t(-1)); }) == "10ffffffffffffffffff01");
  CHECK(one([](auto& w) { w.float64(1, 1.5); }) == "09000000000000f83f");
  CHECK(one([](auto& w) { w.float32(2, 2.5f); }) == "1500002040");
  CHECK(one([](auto& w) { w.float32(2, -0.125f); }) == "15000000be");
  CHECK(one([](auto& w) { w.bytes(1, "ab"); }) == "0a026162");
  CHECK(one([](auto& w) { w.bytes(16, ""); }) == "820100");  // two-byte key
  CHECK(one([](auto& w) {
          tb::ProtoWriter inner;
          inner.varint(1, 1);
          w.message(7, inner);
        }) == "3a020801");
  CHECK(hex(std::string(300, 'x')).size() == 600);  // the helper itself
  tb::ProtoWriter big;
  big.bytes(1, std::string(300, 'x'));
  CHECK(hex(big.str()).substr(0, 6) == "0aac02");  // a length over 127 is a two-byte varint
}

TEST_CASE("whole Events match what the protobuf library serialises") {
  CHECK(hex(tb::file_version_event(1.5)) == "09000000000000f83f1a0d627261696e2e4576656e743a32");
  CHECK(hex(tb::scalars_event(1.5, 300, {{"train/loss", 2.5f}, {"lr", -0.125f}})) ==
        "09000000000000f83f10ac022a1e0a110a0a747261696e2f6c6f737315000020400a090a026c7215000000"
        "be");
  CHECK(hex(tb::text_event(2.0, 7, "events/restart", "hi")) ==
        "09000000000000004010072a260a240a0e6576656e74732f72657374617274420808071200420268694a08"
        "0a060a0474657874");
  CHECK(hex(tb::session_start_event(2.0, 11)) == "090000000000000040100b3a020801");
}

TEST_CASE("TFRecord framing: known bytes, read back, torn and corrupt tails stop the scan") {
  CHECK(hex(tb::tfrecord("hello")) == "0500000000000000eab2043e68656c6c6fbb1f1c19");
  const std::string two = tb::tfrecord("hello") + tb::tfrecord(std::string(200, 'z'));
  tb::RecordScan scan = tb::scan_tfrecords(two);
  REQUIRE(scan.records.size() == 2);
  CHECK(scan.records[0] == "hello");
  CHECK(scan.records[1] == std::string(200, 'z'));
  CHECK(scan.valid_bytes == two.size());

  scan = tb::scan_tfrecords(two.substr(0, two.size() - 3));  // the second cut short
  CHECK(scan.records.size() == 1);
  CHECK(scan.valid_bytes == tb::tfrecord("hello").size());
  std::string corrupt = two;
  corrupt[30] ^= 1;  // a data byte of the second record
  CHECK(tb::scan_tfrecords(corrupt).records.size() == 1);
  corrupt = two;
  corrupt[0] ^= 1;  // the first length: its CRC no longer matches
  CHECK(tb::scan_tfrecords(corrupt).records.empty());
}

TEST_CASE("event_info reads the step and the header; malformed input is refused") {
  auto info = tb::event_info(tb::scalars_event(0.5, 42, {{"a", 1}}));
  REQUIRE(info);
  CHECK(info->step == 42);
  CHECK_FALSE(info->file_version);
  info = tb::event_info(tb::file_version_event(0.5));
  REQUIRE(info);
  CHECK(info->step == 0);
  CHECK(info->file_version);
  CHECK_FALSE(tb::event_info(unhex("0a05616263")));              // a length past the end
  CHECK_FALSE(tb::event_info(unhex("10ffffffffffffffffffff")));  // a varint that never ends
  CHECK_FALSE(tb::event_info(unhex("0b")));                      // wire type 3 (groups)
}

TEST_CASE("writer: config at step 0, scalars per row, events as text") {
  TempDir tmp;
  const fs::path dir = tmp.path / "tb";
  {
    TensorBoardLog log(dir.string(), -1, "name: t\nlogging:\n  tensorboard: true\n");
    CHECK(event_files(dir).empty());  // nothing logged yet: no file
    log.append("train", train_row(1));
    log.append("eval", {{"step", 1.0}, {"val_loss", 9.25}});
    log.append("event", {{"step", 1.0},
                         {"event", std::string("straggler")},
                         {"rank", 3.0},
                         {"host", std::string("n1")}});
    log.append("event", {{"step", 1.0}, {"event", std::string("bad_step")}, {"loss", NAN}});
    log.flush();
    const auto name = fs::path(log.path()).filename().string();
    CHECK(name.rfind("events.out.tfevents.", 0) == 0);
    CHECK(name.substr(name.size() - 2) == ".1");
  }
  const auto events = read_dir(dir);
  REQUIRE(events.size() == 6);  // header, config, train, eval, two events
  CHECK(events[1].step == 0);
  CHECK(events[1].texts.at("config") == "    name: t\n    logging:\n      tensorboard: true\n");
  CHECK(events[2].step == 1);
  CHECK(events[2].scalars.at("train/loss") == 9.5f);
  CHECK(events[2].scalars.at("train/lr") == 1e-3f);
  CHECK(events[2].scalars.size() == 2);
  CHECK(events[3].scalars.at("eval/val_loss") == 9.25f);
  CHECK(events[4].texts.at("events/straggler/rank_3") == "rank: 3, host: n1");
  CHECK(events[5].texts.at("events/bad_step") == "loss: nan");
}

TEST_CASE("writer: resume cuts earlier files back and writes no step twice") {
  TempDir tmp;
  const fs::path dir = tmp.path / "tb";
  {
    TensorBoardLog first(dir.string(), -1, "config: 1\n");
    for (int64_t s = 1; s <= 8; ++s) first.append("train", train_row(s));
    first.append("event", {{"step", 7.0}, {"event", std::string("loss_spike")}});
    first.flush();
  }
  // The checkpoint was at step 5: steps 6..8 and the event at 7 go; a restart is recorded at 5
  // (as the supervisor does) and the relaunched job logs 5 (already there) and 6..10.
  {
    TensorBoardLog(dir.string(), 5, "config: 1\n")
        .append("event", {{"step", 5.0}, {"event", std::string("restart")}});
  }
  {
    TensorBoardLog again(dir.string(), 5, "config: 1\n");
    for (int64_t s = 5; s <= 10; ++s) again.append("train", train_row(s));
    again.flush();
  }
  const auto files = event_files(dir);
  REQUIRE(files.size() == 3);
  CHECK(files[1].filename().string().substr(files[1].filename().string().size() - 2) == ".2");
  CHECK(files[2].filename().string().substr(files[2].filename().string().size() - 2) == ".3");

  std::vector<int64_t> steps;
  int configs = 0, restarts = 0, spikes = 0, starts = 0;
  for (const Decoded& e : read_dir(dir)) {
    if (e.scalars.count("train/loss")) {
      steps.push_back(e.step);
      CHECK(e.scalars.at("train/loss") == float(10.0 - 0.5 * double(e.step)));
    }
    configs += int(e.texts.count("config"));
    restarts += int(e.texts.count("events/restart"));
    spikes += int(e.texts.count("events/loss_spike"));
    if (e.session_start) {
      CHECK(e.step == 6);  // drops what an open TensorBoard holds past the checkpoint
      ++starts;
    }
  }
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(configs == 1);
  CHECK(restarts == 1);
  CHECK(spikes == 0);
  CHECK(starts == 1);  // the restart writer's START (step 6) went with the cut back to 5
}

TEST_CASE("writer: a new run removes the old files; a torn tail is cut on resume") {
  TempDir tmp;
  const fs::path dir = tmp.path / "tb";
  {
    TensorBoardLog old(dir.string(), -1, "");
    old.append("train", train_row(1));
    old.append("train", train_row(2));
  }
  REQUIRE(event_files(dir).size() == 1);
  {  // a crash mid-write: half a record at the end
    std::ofstream f(event_files(dir)[0], std::ios::binary | std::ios::app);
    f << tb::tfrecord(tb::scalars_event(1, 3, {{"train/loss", 1}})).substr(0, 10);
  }
  { TensorBoardLog resumed(dir.string(), 100, ""); }  // logs nothing: leaves no file
  REQUIRE(event_files(dir).size() == 1);
  const std::string bytes = slurp(event_files(dir)[0]);
  CHECK(tb::scan_tfrecords(bytes).valid_bytes == bytes.size());
  CHECK(read_dir(dir).size() == 3);

  {
    TensorBoardLog fresh(dir.string(), -1, "");
    fresh.append("train", train_row(1));
  }
  const auto files = event_files(dir);
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().substr(files[0].filename().string().size() - 2) == ".1");
  CHECK(read_dir(dir).size() == 2);
}

TEST_CASE("MetricsLog writes TensorBoard files unless the run's config turns them off") {
  TempDir on, off;
  std::ofstream(off / "config.yaml") << "name: x\nlogging:\n  tensorboard: false\n";
  std::ofstream(on / "config.yaml") << "name: x\nlogging:\n  every: 1\n";  // the default: on
  for (const TempDir* d : {&on, &off}) {
    MetricsLog log(d->str(), -1);
    log.append("train", train_row(1));
    log.flush();
  }
  CHECK(event_files(off.path / "tb").empty());
  const auto events = read_dir(on.path / "tb");
  REQUIRE(events.size() == 3);
  CHECK(events[1].texts.at("config").find("every: 1") != std::string::npos);
  CHECK(events[2].scalars.at("train/loss") == 9.5f);
}
