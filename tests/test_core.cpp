// The core helpers that host code and CUDA kernels share from one definition: bf16 rounding
// (bf16.h), the shard split (shard.h), the dropout mask (dropout_mask.h), and the one clock;
// and the file helpers (durable_file.h, regular_file.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <sys/stat.h>

#include "temp_dir.h"
#include "trainrun/core/bf16.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/dropout_mask.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/core/shard.h"

using namespace trainrun;

TEST_CASE("bf16 rounds to nearest, ties to even, and keeps NaN a NaN") {
  CHECK(bf16_from_f32(1.0f) == 0x3f80);
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  CHECK(bf16_from_f32(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(bf16_from_f32(1.0f + 3 * 0x1p-8f) == 0x3f82);
  // Just above halfway rounds up.
  CHECK(bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(bf16_from_f32(-2.5f) == 0xc020);
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits only in the low bits must not round into Inf.
  CHECK(std::isnan(bf16_to_f32(bf16_from_f32(f32_from_bits(0x7f800001u)))));
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::infinity())));
  // The largest finite f32 rounds up to Inf, as the hardware conversion does.
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
  for (float x : {0.1f, -3.14159f, 1e-30f, 65504.0f})
    CHECK(std::fabs(round_to_bf16(x) - x) <= std::fabs(x) * 0x1p-8f);
}

TEST_CASE("shard_split partitions [0, n) into near-equal contiguous ranges") {
  static_assert(shard_split(10, 3, 1).begin == 3 && shard_split(10, 3, 1).end == 6);
  for (int64_t n : {0, 1, 7, 1000, 1001}) {
    for (int w : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < w; ++r) {
        const Shard s = shard_split(n, w, r);
        CHECK(s.begin == next);
        CHECK(s.size() >= n / w);
        CHECK(s.size() <= n / w + 1);
        CHECK(shard_of(n, w, r).begin == s.begin);
        next = s.end;
      }
      CHECK(next == n);
    }
  }
  CHECK_THROWS_AS(shard_of(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(shard_of(-1, 2, 0), std::invalid_argument);
}

TEST_CASE("the dropout mask is a pure function of (seed, index) keeping about 1 - p") {
  const DropoutMask a = DropoutMask::make(42, 0.25f), b = DropoutMask::make(42, 0.25f);
  const DropoutMask other = DropoutMask::make(43, 0.25f);
  int kept = 0, same = 0;
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) {
    kept += a.keeps(i);
    CHECK(a.keeps(i) == b.keeps(i));
    same += a.keeps(i) == other.keeps(i);
  }
  CHECK(kept == doctest::Approx(0.75 * kN).epsilon(0.01));
  CHECK(same < 0.7 * kN);  // independent masks agree on ~0.75^2 + 0.25^2 = 62.5%
  const DropoutMask none = DropoutMask::make(7, 0.0f);
  for (int i = 0; i < 1000; ++i) CHECK(none.keeps(i));
  CHECK(dropout_scale(0.2f) == doctest::Approx(1.25));
  // The hash itself (splitmix64's finaliser twice) is part of the checkpoint-resume contract:
  // these bits must not change, or a resumed run would draw other masks.
  CHECK(DropoutMask::make(1, 0.5f).key == mix64(1));
  CHECK(DropoutMask::make(1, 0.5f).thresh == 1u << 23);
}

TEST_CASE("now() is a monotonic clock in seconds") {
  const double a = now(), b = now();
  CHECK(b >= a);
  CHECK(a > 0);
}

TEST_CASE("durable file: the whole text or the old file, and no temporary left behind") {
  namespace fs = std::filesystem;
  trainrun::testing::TempDir dir;
  const std::string path = dir / "MANIFEST";
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  write_file_durably(path, "one\n");
  CHECK(read(path) == "one\n");
  write_file_durably(path, "two, longer\n");  // replaces it whole
  CHECK(read(path) == "two, longer\n");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 1);
  CHECK_THROWS_WITH_AS(write_file_durably(dir / "no/such/folder/x", "t"),
                       doctest::Contains("cannot create"), std::runtime_error);
  CHECK_THROWS_WITH_AS(rename_durably(dir / "absent.tmp", path), doctest::Contains("rename to"),
                       std::runtime_error);
  CHECK(read(path) == "two, longer\n");
  CHECK_THROWS_WITH_AS(fsync_path(dir / "absent", false), doctest::Contains("cannot open"),
                       std::runtime_error);
  // A folder where the file goes: the rename fails, and the temporary goes with it.
  fs::create_directory(dir / "sub");
  fs::create_directory(dir / "sub/full");
  CHECK_THROWS_WITH_AS(write_file_durably(dir / "sub/full", "t"), doctest::Contains("rename to"),
                       std::runtime_error);
  CHECK(std::distance(fs::directory_iterator(dir / "sub"), fs::directory_iterator{}) == 1);
}

TEST_CASE("shard_of partitions [0, n) into near-equal contiguous ranges") {
  for (int w : {1, 2, 3, 7, 64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1001}, int64_t{1} << 40}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < w; ++r) {
        Shard s = shard_of(n, w, r);
        CHECK(s.begin == next);
        CHECK(s.size() >= 0);
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
        next = s.end;
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  }
  CHECK(shard_of(1001, 2, 0).size() == 500);
  CHECK(shard_of(1001, 2, 1).begin == 500);
  CHECK(shard_of(1001, 2, 1).size() == 501);
  CHECK_THROWS_AS(shard_of(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(shard_of(10, 0, 0), std::invalid_argument);
}

TEST_CASE("regular_file: a regular file within its cap is read; anything else is a named error") {
  namespace fs = std::filesystem;
  trainrun::testing::TempDir dir;
  const FileRule rule{1 << 20, kExitRunDir, "the fix"};
  auto lines_of = [&](const std::string& path, size_t max_line) {
    std::vector<std::string> out;
    CHECK(
        read_regular_lines(path, rule, max_line, [&](std::string_view l) { out.emplace_back(l); }));
    return out;
  };
  CHECK_FALSE(read_regular_file(dir / "absent", rule));
  CHECK_FALSE(read_regular_lines(dir / "absent", rule, 10, [](std::string_view) {}));

  // Lines across the reader's 64 KiB chunks; one too long is skipped whole, the rest kept; the
  // last needs no '\n'.
  const std::string long_line(100000, 'x'), wide(70000, 'w');
  std::ofstream(dir / "lines") << "a\n" << long_line << "\nb\n" << wide << "\nlast";
  const auto lines = lines_of(dir / "lines", 80000);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "a");
  CHECK(lines[1] == "b");
  CHECK(lines[2] == wide);
  CHECK(lines[3] == "last");
  CHECK(read_regular_file(dir / "lines", rule)->size() == 2 + 100001 + 2 + 70001 + 4);

  // Over the cap: refused from its size, before a byte is read.
  CHECK_THROWS_WITH_AS(read_regular_file(dir / "lines", {1000, kExitRunDir, "the fix"}),
                       doctest::Contains("is larger than the"), Error);
  // A FIFO, a device through a link, a folder: refused at once (a FIFO's open does not block).
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir / "zero");
  for (const char* name : {"fifo", "zero"}) {
    try {
      read_regular_file(dir / name, rule);
      FAIL("read ", name);
    } catch (const Error& e) {
      CHECK(e.code() == kExitRunDir);
      CHECK(std::string(e.what()).find("not a regular file") != std::string::npos);
      CHECK(std::string(e.what()).find("the fix") != std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS(read_regular_file(dir.str(), rule), doctest::Contains("is a directory"),
                       Error);
}
