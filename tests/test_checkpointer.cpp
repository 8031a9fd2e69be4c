// Checkpointer: pruning to keep_last, async == sync, errors surfaced, no partial file after a
// failed, full-disk or killed write (the folders training writes, and the single file `export`
// writes), and several writers at once.
#include "checkpoint_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::checkpoint_test;

namespace {

// A one-rank save as the checkpoint manager makes it without async: write, then commit.
void save_and_commit(Checkpointer& ck, const CheckpointData& d) {
  ck.save(snapshot_of(d));
  ck.commit(d.state.step, 1);
}

}  // namespace

TEST_CASE("Checkpointer keeps the newest keep_last good checkpoints") {
  TempDir dir;
  Checkpointer ck(dir.str(), 2, false);
  for (int64_t s : {1, 2, 3}) save_and_commit(ck, fake_state(s));
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 3), checkpoint_path(dir.str(), 2)});
  // A damaged checkpoint does not count towards keep_last: step 2 stays, damaged step 3 goes.
  std::string p3 = rank_file(checkpoint_path(dir.str(), 3), 0, 1);
  flip_byte(p3, data_offset(p3) + 4 * 100);
  save_and_commit(ck, fake_state(4));
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 4), checkpoint_path(dir.str(), 2)});
}

TEST_CASE("async save then wait gives the same checkpoints as sync") {
  TempDir a, b;
  {
    Checkpointer sync(a.str(), 3, false);
    Checkpointer async(b.str(), 3, true);
    for (int64_t s : {100, 200}) {
      CHECK(sync.save(snapshot_of(fake_state(s, uint32_t(s)))) >= 0.0);
      sync.commit(s, 1);
      CHECK(async.save(snapshot_of(fake_state(s, uint32_t(s)))) >= 0.0);  // commits itself
    }
    async.wait();
  }
  for (int64_t s : {100, 200}) {
    CheckpointData x = read_checkpoint(checkpoint_path(a.str(), s));
    CheckpointData y = read_checkpoint(checkpoint_path(b.str(), s));
    check_equal(x, y);
    check_same_tensors(y, fake_state(s, uint32_t(s)), 1);
  }
  CHECK(temp_files(b.str()).empty());
}

TEST_CASE("async background errors surface in wait()") {
  TempDir dir;
  fs::create_directories(dir.path / "checkpoints");
  // A directory where the rank's file should go: the final rename fails.
  fs::create_directories(rank_file(checkpoint_path(dir.str(), 1), 0, 1) + "/blocker");
  Checkpointer ck(dir.str(), 2, true);
  ck.save(snapshot_of(fake_state(1)));
  CHECK_THROWS_AS(ck.wait(), CheckpointError);
  CHECK(list_checkpoints(dir.str()).empty());  // never committed
  ck.wait();                                   // the error was reported once
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("a checkpoint that cannot be written is exit 74 however it fails, sync or async") {
  // A full disk can fail the checkpoints folder's creation as well as the file's write: one
  // rule, a write error (exit 74) naming the path, not "no usable checkpoint" (4).
  for (const bool async : {false, true}) {
    CAPTURE(async);
    TempDir dir;
    std::ofstream(dir.path / "checkpoints") << "in the folder's place";
    Checkpointer ck(dir.str(), 2, async);
    int code = 0;
    std::string what;
    try {
      ck.save(snapshot_of(fake_state(1)));
      ck.wait();
    } catch (const CheckpointError& e) {
      code = e.code();
      what = e.what();
    }
    CHECK(code == kExitWrite);
    CHECK(what.find((dir.path / "checkpoints").string()) != std::string::npos);
  }
  // A background write's own failure (here the final rename) surfaces as the same code.
  TempDir dir;
  fs::create_directories(rank_file(checkpoint_path(dir.str(), 1), 0, 1) + "/blocker");
  Checkpointer ck(dir.str(), 2, true);
  ck.save(snapshot_of(fake_state(1)));
  int code = 0;
  try {
    ck.wait();
  } catch (const CheckpointError& e) {
    code = e.code();
  }
  CHECK(code == kExitWrite);
}

TEST_CASE("a write that cannot happen throws and leaves the previous checkpoint intact") {
  TempDir dir;
  save_direct(dir.str(), fake_state(1));
  std::string prev = single_file_checkpoint_path(dir.str(), 1);
  auto before = fs::file_size(prev);

  SUBCASE("target under a regular file") {
    std::string bad = prev + "/step-0000002.h5";
    CHECK_THROWS_AS(write_checkpoint(bad, fake_state(2)), CheckpointError);
  }
  SUBCASE("disk full (file size limit) while overwriting and while saving") {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      signal(SIGXFSZ, SIG_IGN);  // writes past the limit then fail with EFBIG instead
      rlimit lim{1 << 20, 1 << 20};
      setrlimit(RLIMIT_FSIZE, &lim);
      int rc = 0;
      try {
        write_checkpoint(prev, fake_state(2));
        rc |= 1;
      } catch (const CheckpointError&) {
      }
      try {
        Checkpointer ck(dir.str(), 1, false);
        ck.save(snapshot_of(fake_state(3)));
        rc |= 2;
      } catch (const CheckpointError&) {
      }
      _exit(rc);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_FALSE(fs::exists(rank_file(checkpoint_path(dir.str(), 3), 0, 1)));
    CHECK(list_checkpoints(dir.str()) == std::vector<std::string>{prev});
  }
  CHECK(fs::file_size(prev) == before);
  check_equal(read_checkpoint(prev), fake_state(1));
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("a checkpoint without room is a write error (exit 74) before HDF5 writes a byte") {
  TempDir dir;
  save_direct(dir.str(), fake_state(1));
  const std::string prev = single_file_checkpoint_path(dir.str(), 1);
  const auto before = fs::file_size(prev);
  // The reservation is trimmed away when HDF5 closes the file: it is no larger than the data
  // and HDF5's own bytes need.
  save_direct(dir.str(), fake_state(2));
  CHECK(fs::file_size(single_file_checkpoint_path(dir.str(), 2)) == before);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{before / 2, before / 2};  // room for half a checkpoint
    setrlimit(RLIMIT_FSIZE, &lim);
    // A single file, then a rank's file of the folder training writes.
    int rc = 1;
    try {
      write_checkpoint(single_file_checkpoint_path(dir.str(), 3), fake_state(3));
    } catch (const CheckpointWriteError& e) {
      const std::string what = e.what();
      rc = e.code() == kExitWrite && what.find("MiB needed") != std::string::npos ? 0 : 2;
    } catch (...) {
      rc = 3;
    }
    try {
      Checkpointer ck(dir.str(), 0, false);
      ck.save(snapshot_of(fake_state(3)));
      rc = rc == 0 ? 5 : rc;
    } catch (const CheckpointWriteError& e) {
      const std::string what = e.what();
      if (e.code() != kExitWrite || what.find("MiB needed") == std::string::npos) rc = 6;
    } catch (...) {
      rc = 7;
    }
    // HDF5 never opened the file, so it holds no half-closed one that would crash its shutdown.
    if (rc == 0 && H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) != 0) rc = 4;
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(single_file_checkpoint_path(dir.str(), 3)));
  CHECK_FALSE(fs::exists(rank_file(checkpoint_path(dir.str(), 3), 0, 1)));
  CHECK(temp_files(dir.str()).empty());
}

TEST_CASE("SIGKILL during a write never leaves a bad checkpoint at the target") {
  // About 63 MB: one 5M-element tensor (over the 16 MiB slab size, so several writes) in
  // weights and both moments.
  const int64_t n = int64_t(5) << 20;
  CheckpointData big;
  big.state.step = 2;
  big.params = {{"big", {4, n / 4}, 0}};
  big.weights.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) big.weights[size_t(i)] = float(i % 1000);
  big.adam_m = big.weights;
  big.adam_v = big.weights;

  for (const bool folder : {true, false}) {  // what training writes; what `export` writes
    CAPTURE(folder);
    TempDir dir;
    save_direct(dir.str(), fake_state(1));
    const std::string prev = single_file_checkpoint_path(dir.str(), 1);
    const std::string target =
        folder ? checkpoint_path(dir.str(), 2) : single_file_checkpoint_path(dir.str(), 2);
    for (int delay_ms : {0, 5, 20, 60, -1}) {  // -1: let it finish
      CAPTURE(delay_ms);
      int fds[2];
      REQUIRE(pipe(fds) == 0);
      pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        close(fds[0]);
        char c = 1;
        if (write(fds[1], &c, 1) != 1) _exit(3);
        try {
          if (folder) {
            Checkpointer ck(dir.str(), 0, false);
            ck.save(snapshot_of(big));
            ck.commit(2, 1);
          } else {
            write_checkpoint(target, big);
          }
        } catch (...) {
          _exit(2);
        }
        _exit(0);
      }
      close(fds[1]);
      char c = 0;
      REQUIRE(read(fds[0], &c, 1) == 1);
      close(fds[0]);
      int status = 0;
      if (delay_ms >= 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        kill(pid, SIGKILL);
        REQUIRE(waitpid(pid, &status, 0) == pid);
      } else {
        REQUIRE(waitpid(pid, &status, 0) == pid);
        REQUIRE(WIFEXITED(status));
        REQUIRE(WEXITSTATUS(status) == 0);
        CheckpointData back = read_checkpoint(target);
        REQUIRE(back.weights.size() == size_t(n));
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += back.weights[size_t(i)] != float(i % 1000);
        CHECK(wrong == 0);
        CHECK(same_bits(back.adam_v, back.weights));
        CHECK(back.params[0].shape == std::vector<int64_t>{4, n / 4});
      }
      CHECK(verify_checkpoint(prev).ok);
      // A folder is a checkpoint once its MANIFEST is there, and then a whole one.
      const bool listed =
          !list_checkpoints(dir.str()).empty() && list_checkpoints(dir.str())[0] == target;
      CHECK(listed == (folder ? fs::exists(fs::path(target) / "MANIFEST") : fs::exists(target)));
      if (listed) CHECK(verify_checkpoint(target).ok);
      std::vector<std::string> warnings;
      auto good = latest_good_checkpoint(dir.str(), &warnings);
      REQUIRE(good);
      CHECK(verify_checkpoint(*good).ok);
      CHECK(warnings.empty());
      // The dead writer's temporary is cleaned up: by any reader for a single file, by the next
      // job's rank 0 inside a folder (only then is no rank of a job writing into one).
      if (folder) Checkpointer next(dir.str(), 0, false);
      CHECK(temp_files(dir.str()).empty());
      fs::remove_all(target);
    }
  }
}

// Checkpointers of one process writing at the same time (a sync save beside an async writer,
// as a test or a tool may do): each file is built from an in-memory HDF5 image, which the core
// driver knows by its name; built per save, two at once found it "already open".
TEST_CASE("checkpoints written from several threads at once all land") {
  std::vector<TempDir> dirs(4);
  std::vector<std::thread> writers;
  std::vector<std::string> errors(dirs.size());
  for (size_t i = 0; i < dirs.size(); ++i)
    writers.emplace_back([&, i] {
      try {
        Checkpointer ck(dirs[i].str(), 0, false);
        for (int64_t s = 1; s <= 8; ++s) {
          ck.save(snapshot_of(fake_state(s, uint32_t(i))));
          ck.commit(s, 1);
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : writers) t.join();
  for (size_t i = 0; i < dirs.size(); ++i) {
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    CHECK(list_checkpoints(dirs[i].str()).size() == 8);
  }
}

// Last in this file, so it runs after every case above (doctest runs a file's cases in order):
// an HDF5 file left open on some path keeps its inode in HDF5's list of open files, and a later
// checkpoint that happens to get that inode number fails with "unable to truncate a file which
// is already open".
TEST_CASE("no HDF5 file or object is left open by the cases above") {
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) == 0);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
}
