// Checkpoint files: bit-exact round trip, the layout HDF5 tools see, damage detected and named,
// and the fallback to the newest good file.
#include "checkpoint_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::checkpoint_test;

TEST_CASE("checkpoint round trip is bit-exact") {
  TempDir dir;
  CheckpointData d = fake_state(42);
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, d);
  CHECK(fs::exists(path));
  CHECK(temp_files(dir.str()).empty());
  check_equal(read_checkpoint(path), d);
  Verdict v = verify_checkpoint(path);
  CHECK(v.ok);
  CHECK(v.step == 42);

  SUBCASE("without optimizer moments and with an empty config") {
    d.adam_m.clear();
    d.adam_v.clear();
    d.state.config_yaml.clear();
    write_checkpoint(path, d);
    check_equal(read_checkpoint(path), d);
  }
}

TEST_CASE("checkpoint layout is visible to HDF5 tools") {
  TempDir dir;
  CheckpointData d = fake_state(7);
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, d);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  for (const char* attr :
       {"format_version", "trainrun_version", "step", "tokens_seen", "samples_seen", "seed",
        "bad_steps_total", "restarts", "lr_scale", "world_size", "created"})
    CHECK_MESSAGE(H5Aexists(f, attr) > 0, attr);
  for (const ParamEntry& p : d.params)
    for (std::string g : {"/model/", "/optimizer/m/", "/optimizer/v/"}) {
      std::string name = g + p.name;
      CHECK_MESSAGE(H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0, name);
    }
  CHECK(H5Lexists(f, "/config", H5P_DEFAULT) > 0);

  hid_t ds = H5Dopen2(f, "/model/blocks.3.mlp.fc.weight", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[2];
  REQUIRE(H5Sget_simple_extent_ndims(space) == 2);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  CHECK(dims[0] == 1100);
  CHECK(dims[1] == 1000);
  hid_t dcpl = H5Dget_create_plist(ds);
  CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED);
  hsize_t chunk[2];
  REQUIRE(H5Pget_chunk(dcpl, 2, chunk) == 2);
  CHECK(chunk[0] <= dims[0]);
  CHECK(chunk[1] <= dims[1]);
  CHECK(chunk[0] * chunk[1] <= (1u << 20));
  CHECK(chunk[0] < dims[0]);  // more than one chunk: the 1M-element cap applies
  unsigned flags = 0;
  size_t nelmts = 0;
  CHECK(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelmts, nullptr, 0, nullptr,
                             nullptr) >= 0);
  hid_t a = H5Aopen(ds, "offset", H5P_DEFAULT);
  REQUIRE(a >= 0);
  int64_t off = -1;
  H5Aread(a, H5T_NATIVE_INT64, &off);
  CHECK(off == d.params[3].offset);
  H5Aclose(a);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);

  std::string text = describe_checkpoint(path);
  CHECK(text.find("/model/blocks.3.mlp.fc.weight [1100, 1000]") != std::string::npos);
  CHECK(text.find("step: 7") != std::string::npos);
  CHECK(text.find("verdict: OK") != std::string::npos);
}

TEST_CASE("a flipped byte or a truncated file is reported as damage") {
  TempDir dir;
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(5));

  SUBCASE("flipped byte in a dataset's data") {
    flip_byte(path, middle_of_data(path, "/optimizer/v/blocks.3.mlp.fc.weight"));
  }
  SUBCASE("truncated") {
    fs::resize_file(path, fs::file_size(path) / 2);
  }

  try {
    read_checkpoint(path);
    FAIL("a damaged checkpoint was read");
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("damaged") != std::string::npos);
    CHECK(e.code() == kExitCheckpoint);
  }
  Verdict v = verify_checkpoint(path);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.reason.empty());
  CHECK(describe_checkpoint(path).find("verdict: DAMAGED") != std::string::npos);
}

TEST_CASE("the checksum names the damage") {
  TempDir dir;
  std::string path = (dir.path / "c.h5").string();
  write_checkpoint(path, fake_state(5));
  flip_byte(path, middle_of_data(path, "/model/wte"));
  Verdict v = verify_checkpoint(path);
  CHECK_FALSE(v.ok);
  CHECK(v.reason.find("Fletcher32") != std::string::npos);
}

TEST_CASE("latest_good_checkpoint falls back past damaged files") {
  TempDir dir;
  std::vector<std::string> warnings;
  CHECK_FALSE(latest_good_checkpoint(dir.str(), &warnings).has_value());

  for (int64_t s : {10, 20, 30}) save_direct(dir.str(), fake_state(s));
  std::vector<std::string> all = list_checkpoints(dir.str());
  REQUIRE(all.size() == 3);
  CHECK(all[0] == single_file_checkpoint_path(dir.str(), 30));
  CHECK(all[2] == single_file_checkpoint_path(dir.str(), 10));
  CHECK(fs::path(all[0]).filename() == "step-0000030.h5");

  auto good = latest_good_checkpoint(dir.str(), &warnings);
  REQUIRE(good);
  CHECK(*good == all[0]);
  CHECK(warnings.empty());

  fs::resize_file(all[0], 1000);
  flip_byte(all[1], middle_of_data(all[1], "/model/wte"));
  good = latest_good_checkpoint(dir.str(), &warnings);
  REQUIRE(good);
  CHECK(*good == all[2]);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find(all[0]) != std::string::npos);
  CHECK(warnings[0].find("falling back to " + all[2]) != std::string::npos);
  CHECK(warnings[1].find(all[1]) != std::string::npos);

  fs::resize_file(all[2], 10);
  warnings.clear();
  CHECK_FALSE(latest_good_checkpoint(dir.str(), &warnings).has_value());
  CHECK(warnings.size() == 3);
}

// Last in this file, so it runs after every case above (doctest runs a file's cases in order):
// an HDF5 file left open on some path keeps its inode in HDF5's list of open files, and a later
// checkpoint that happens to get that inode number fails with "unable to truncate a file which
// is already open".
TEST_CASE("no HDF5 file or object is left open by the cases above") {
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) == 0);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
}
