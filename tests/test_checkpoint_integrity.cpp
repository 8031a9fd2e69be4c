// What a checkpoint may hold: no non-finite value in or out, every root attribute and the
// parameter table checksummed, absurd values refused, format 1 files still read.
#include <map>

#include "checkpoint_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::checkpoint_test;

TEST_CASE("a non-finite snapshot is never written") {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (int buffer : {0, 1, 2}) {
      CAPTURE(bad);
      CAPTURE(buffer);
      CheckpointData d = fake_state(3);
      StateBuffer& flat = buffer == 0 ? d.weights : buffer == 1 ? d.adam_m : d.adam_v;
      const ParamEntry& fc = d.params[3];  // blocks.3.mlp.fc.weight, over one chunk
      flat[size_t(fc.offset + 1234)] = bad;
      flat[size_t(fc.offset + 999999)] = bad;
      const std::string group = buffer == 0 ? "model" : buffer == 1 ? "optimizer/m" : "optimizer/v";

      const std::string why = non_finite_reason(d);
      CHECK(why.find(group + "/blocks.3.mlp.fc.weight") != std::string::npos);
      CHECK(why.find("2 non-finite values") != std::string::npos);
      CHECK(why.find("element 1234") != std::string::npos);

      TempDir dir;
      const std::string path = (dir.path / "c.h5").string();
      try {
        write_checkpoint(path, d);
        FAIL("a non-finite snapshot was written");
      } catch (const NonFiniteCheckpoint& e) {
        CHECK(e.code() == kExitCheckpoint);
        CHECK(std::string(e.what()).find(why) != std::string::npos);
      }
      CHECK_FALSE(fs::exists(path));

      // The Checkpointer refuses a rank's snapshot in the caller's thread, sync or async,
      // naming the tensor, and writes and prunes nothing: the previous checkpoint stays the
      // newest.
      for (bool async : {false, true}) {
        CAPTURE(async);
        TempDir run;
        Checkpointer ck(run.str(), 1, async);
        ck.save(snapshot_of(fake_state(1)));
        if (!async) ck.commit(1, 1);
        ck.wait();
        RankSnapshot snap = snapshot_of(d, 1, 2);  // rank 1 of 2 holds the bad elements
        const std::string snap_why = non_finite_reason(snap);
        CHECK(snap_why.find("rank 1") != std::string::npos);
        CHECK(snap_why.find(group + "/blocks.3.mlp.fc.weight") != std::string::npos);
        const std::string tensor = group + "/blocks.3.mlp.fc.weight";
        CHECK_THROWS_WITH_AS(ck.save(std::move(snap)), doctest::Contains(tensor.c_str()),
                             NonFiniteCheckpoint);
        ck.wait();
        CHECK(list_checkpoints(run.str()) ==
              std::vector<std::string>{checkpoint_path(run.str(), 1)});
        CHECK_FALSE(fs::exists(checkpoint_path(run.str(), 3)));
        CHECK(temp_files(run.str()).empty());
      }
    }
  CHECK(non_finite_reason(fake_state(3)).empty());
}

TEST_CASE("find_non_finite counts NaN and infinities, nothing else") {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          1e-30f};
  CHECK_FALSE(find_non_finite(v.data(), v.size()).has_value());
  CHECK_FALSE(find_non_finite(nullptr, 0).has_value());
  uint32_t payload_nan = 0x7fc01234u;  // a NaN with a payload, and a negative one
  float f;
  std::memcpy(&f, &payload_nan, 4);
  v.push_back(f);
  v.push_back(-std::numeric_limits<float>::quiet_NaN());
  v.push_back(-std::numeric_limits<float>::infinity());
  auto nf = find_non_finite(v.data(), v.size());
  REQUIRE(nf.has_value());
  CHECK(nf->count == 3);
  CHECK(nf->first == 6);
  CHECK(std::isnan(nf->value));
}

TEST_CASE("a file holding a non-finite value is unusable, and fallback skips it") {
  for (const char* dataset :
       {"/model/wte", "/optimizer/m/odd.shape", "/optimizer/v/blocks.3.mlp.fc.weight"}) {
    CAPTURE(dataset);
    TempDir dir;
    for (int64_t s : {10, 20}) save_direct(dir.str(), fake_state(s));
    const std::string newest = single_file_checkpoint_path(dir.str(), 20);
    poke_float(newest, dataset, 77, std::numeric_limits<float>::infinity());

    Verdict v = judged(newest);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK(v.reason.find(std::string(dataset).substr(1) + " holds 1 non-finite value") !=
          std::string::npos);
    CHECK(v.reason.find("element 77, is inf") != std::string::npos);

    std::vector<std::string> warnings;
    auto good = latest_good_checkpoint(dir.str(), &warnings);
    REQUIRE(good);
    CHECK(*good == single_file_checkpoint_path(dir.str(), 10));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(newest + " is not usable") != std::string::npos);
    CHECK(warnings[0].find("falling back to " + *good) != std::string::npos);
  }
}

TEST_CASE("a flipped bit in any root attribute is detected") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  struct Case {
    const char* name;
    int bit;
  };
  // lr_scale 1.0: bit 62 makes it inf (the learning rate with it), bit 52 a plausible 0.5.
  for (const Case& c :
       {Case{"lr_scale", 62}, Case{"lr_scale", 52}, Case{"lr_scale", 0}, Case{"step", 0},
        Case{"step", 63}, Case{"tokens_seen", 5}, Case{"samples_seen", 1}, Case{"seed", 17},
        Case{"bad_steps_total", 2}, Case{"restarts", 0}, Case{"world_size", 33},
        Case{"world_size", 1}, Case{"flat_size", 3}, Case{"param_count", 0}, Case{"created", 0},
        Case{"trainrun_version", 1}}) {
    CAPTURE(c.name);
    CAPTURE(c.bit);
    CheckpointData d = fake_state(9);
    d.state.lr_scale = 1.0;
    write_checkpoint(path, d);
    REQUIRE(judged(path).ok);
    flip_attr_bit(path, "/", c.name, c.bit);
    if (std::string(c.name) == "lr_scale" && c.bit == 62)
      CHECK(std::isinf(attr<double>(path, "lr_scale", H5T_NATIVE_DOUBLE)));

    Verdict v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK_FALSE(v.unusable);  // damage, not a bad value written on purpose
    CHECK(!v.reason.empty());
    // Most flips reach the metadata comparison, which names the attribute; a few are caught
    // earlier by the layout checks (a changed flat_size or param_count).
    if (v.reason.find("checksummed copy") != std::string::npos)
      CHECK(v.reason.find(std::string("`") + c.name + "=") != std::string::npos);
    else
      CHECK((std::string(c.name) == "flat_size" || std::string(c.name) == "param_count"));
    CHECK_FALSE(describe_checkpoint(path).find("verdict: OK") != std::string::npos);
  }
}

TEST_CASE("a flipped bit in the stored bytes of an attribute fails HDF5's own checksum") {
  // Damage on disk, below HDF5: the object header's checksum (file format 1.10) catches it
  // before the /metadata comparison could.
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(9);
  d.state.lr_scale = 1.0;
  write_checkpoint(path, d);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t name = bytes.find("lr_scale");
  REQUIRE(name != std::string::npos);
  const double one = 1.0;
  const size_t value = bytes.find(std::string(reinterpret_cast<const char*>(&one), 8), name);
  REQUIRE(value != std::string::npos);
  REQUIRE(value - name < 256);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(value + 7));
  f.put(char(0x3f ^ 0x40));  // 1.0 -> inf
  f.close();
  // HDF5 1.10 leaks a few hundred bytes inside the library after an object header fails its
  // checksum (nothing of ours is open then). The verdict is taken in a child process that ends
  // with _exit, so LeakSanitizer, which checks at exit(), still watches every other test.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const Verdict c = verify_checkpoint(path);
    const std::string msg = std::string(c.ok ? "1" : "0") + (c.unusable ? "1" : "0") + c.reason;
    const ssize_t wrote = ::write(fds[1], msg.data(), msg.size());
    ::_exit(wrote == static_cast<ssize_t>(msg.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  REQUIRE(msg.size() >= 2);
  Verdict v;
  v.ok = msg[0] == '1';
  v.unusable = msg[1] == '1';
  v.reason = msg.substr(2);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.unusable);
  CHECK_MESSAGE(v.reason.find("checksum") != std::string::npos, v.reason);
}

TEST_CASE("the parameter table and the format version are covered too") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(4));
  std::string expect;

  SUBCASE("a renamed tensor (in all three groups, so the layouts still agree)") {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (std::string g : {"/model/", "/optimizer/m/", "/optimizer/v/"})
      REQUIRE(H5Lmove(f, (g + "wte").c_str(), f, (g + "wtf").c_str(), H5P_DEFAULT, H5P_DEFAULT) >=
              0);
    H5Fclose(f);
    expect = "param=wtf";
  }
  SUBCASE("a changed offset (in all three groups)") {
    for (const char* g :
         {"/model/ln_f.scale", "/optimizer/m/ln_f.scale", "/optimizer/v/ln_f.scale"})
      flip_attr_bit(path, g, "offset", 1);  // +2: into the padding after it, no overlap
    expect = "param=ln_f.scale offset=";
  }
  SUBCASE("a flipped byte inside /metadata itself (compact: in its checksummed header)") {
    flip_byte(path, offset_of_text(path, "lr_scale=") + 3);
    expect = "checksum";
  }
  SUBCASE("/metadata removed from a format 3 file") {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(H5Ldelete(f, "metadata", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect = "/metadata is missing";
  }
  SUBCASE("format_version 3 -> 7") {
    flip_attr_bit(path, "/", "format_version", 2);
    expect = "not supported";
  }
  SUBCASE("format_version 3 -> 0") {
    flip_attr_bit(path, "/", "format_version", 0);
    flip_attr_bit(path, "/", "format_version", 1);
    expect = "not supported";
  }
  Verdict v = judged(path);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.unusable);
  CHECK_MESSAGE(v.reason.find(expect) != std::string::npos, v.reason);
}

TEST_CASE("a format 1 file still loads, with a caveat; its absurd values are refused") {
  TempDir dir;
  for (int64_t s : {1, 2}) save_direct(dir.str(), fake_state(s));
  const std::string path = single_file_checkpoint_path(dir.str(), 2);
  make_format_1(path);

  Verdict v = judged(path);
  REQUIRE(v.ok);
  CHECK(v.note.find("format 1") != std::string::npos);
  check_equal(read_checkpoint(path), fake_state(2));
  const std::string text = describe_checkpoint(path);
  CHECK(text.find("metadata checksum: none (format 1") != std::string::npos);
  CHECK(text.find("verdict: OK (format 1") != std::string::npos);
  std::vector<std::string> warnings;
  CHECK(latest_good_checkpoint(dir.str(), &warnings) == path);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("format 1") != std::string::npos);

  // Without a checksum the values themselves are judged: what no run produces is refused.
  struct Case {
    double lr_scale;
    const char* says;
  };
  for (const Case& c :
       {Case{std::numeric_limits<double>::infinity(), "lr_scale is inf"},
        Case{std::numeric_limits<double>::quiet_NaN(), "lr_scale is nan"},
        Case{0.0, "lr_scale is 0"}, Case{-0.5, "lr_scale is -0.5"}, Case{4.0, "lr_scale is 4"}}) {
    CAPTURE(c.says);
    set_double_attr(path, "lr_scale", c.lr_scale);
    v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK_MESSAGE(v.reason.find(c.says) != std::string::npos, v.reason);
    warnings.clear();
    CHECK(latest_good_checkpoint(dir.str(), &warnings) ==
          single_file_checkpoint_path(dir.str(), 1));
  }
}

TEST_CASE("a format 1 file with a negative step or no ranks is refused") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  for (const char* name : {"step", "samples_seen", "world_size"}) {
    CAPTURE(name);
    write_checkpoint(path, fake_state(6));
    make_format_1(path);
    flip_attr_bit(path, "/", name, 63);  // the sign bit of the int64
    Verdict v = judged(path);
    CHECK_FALSE(v.ok);
    CHECK(v.unusable);
    CHECK(v.reason.find(name) != std::string::npos);
  }
}

TEST_CASE("absurd training state is refused at write time") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(5);
  SUBCASE("lr_scale inf") {
    d.state.lr_scale = std::numeric_limits<double>::infinity();
  }
  SUBCASE("lr_scale 0") {
    d.state.lr_scale = 0;
  }
  SUBCASE("lr_scale above 1") {
    d.state.lr_scale = 1.5;
  }
  SUBCASE("negative step") {
    d.state.step = -1;
  }
  SUBCASE("negative tokens_seen") {
    d.state.tokens_seen = -7;
  }
  SUBCASE("no ranks") {
    d.state.world_size = 0;
  }
  try {
    write_checkpoint(path, d);
    FAIL("an absurd state was written");
  } catch (const NonFiniteCheckpoint&) {
    FAIL("not a non-finite value");
  } catch (const CheckpointError& e) {
    CHECK(std::string(e.what()).find("cannot write checkpoint") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("format 3 files carry /metadata and /config as compact scalar strings") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(8);
  d.state.config_yaml = "name: x\nnote: \"caf\u00e9\"\n";
  write_checkpoint(path, d);
  CHECK(attr<int64_t>(path, "format_version", H5T_NATIVE_INT64) == kCheckpointFormatVersion);
  CHECK(kCheckpointFormatVersion == 3);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::map<std::string, std::string> texts;
  for (const char* name : {"/metadata", "/config"}) {
    CAPTURE(name);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    REQUIRE(ds >= 0);
    hid_t dcpl = H5Dget_create_plist(ds);
    CHECK(H5Pget_layout(dcpl) == H5D_COMPACT);  // in the object header: checksummed by HDF5
    hid_t space = H5Dget_space(ds);
    CHECK(H5Sget_simple_extent_type(space) == H5S_SCALAR);
    hid_t type = H5Dget_type(ds);
    CHECK(H5Tget_class(type) == H5T_STRING);
    CHECK(H5Tget_cset(type) == H5T_CSET_UTF8);
    std::string text(H5Tget_size(type), '\0');
    REQUIRE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0);
    texts[name] = text;
    H5Tclose(type);
    H5Sclose(space);
    H5Pclose(dcpl);
    H5Dclose(ds);
  }
  H5Fclose(f);
  for (const char* line : {"step=8\n", "lr_scale=0.25\n", "world_size=4\n",
                           "seed=18364758544493064720\n", "param=blocks.3.mlp.fc.weight offset="})
    CHECK_MESSAGE(texts["/metadata"].find(line) != std::string::npos, line);
  CHECK(texts["/config"] == d.state.config_yaml);
  CHECK(read_checkpoint(path).state.config_yaml == d.state.config_yaml);
}

TEST_CASE("a config too large for the object header stays a checksummed character array") {
  TempDir dir;
  const std::string path = (dir.path / "c.h5").string();
  CheckpointData d = fake_state(8);
  d.state.config_yaml = std::string(70000, 'y');
  write_checkpoint(path, d);
  CHECK(read_checkpoint(path).state.config_yaml == d.state.config_yaml);
  flip_byte(path, middle_of_data(path, "/config"));
  CHECK_THROWS_WITH(read_checkpoint(path), doctest::Contains("Fletcher32"));
}

// Last in this file, so it runs after every case above (doctest runs a file's cases in order):
// an HDF5 file left open on some path keeps its inode in HDF5's list of open files, and a later
// checkpoint that happens to get that inode number fails with "unable to truncate a file which
// is already open".
TEST_CASE("no HDF5 file or object is left open by the cases above") {
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) == 0);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
}
