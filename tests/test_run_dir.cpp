// The run directory: resolving a config or --resume, the lock that keeps one run per
// directory, archiving with --new, and never touching a user's files.

#include "launch_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::launch_test;

TEST_CASE("resolve_run: a config, or what --resume points at") {
  TempDir dir;
  const std::string run_dir = dir / "run";
  RunRequest r;

  SUBCASE("nothing to run") {
    CHECK_THROWS_AS(resolve_run(r), ConfigError);
    r.resume = "";
    CHECK_THROWS_AS(resolve_run(r), ConfigError);  // --resume without a value or a config
  }
  SUBCASE("a fresh run from a config; --run-dir wins") {
    r.config = write_config(dir, run_dir);
    auto [exp, file, step, use, notes] = resolve_run(r);
    CHECK(exp.name == "resume-test");
    CHECK(exp.run_dir == run_dir);
    CHECK(file.empty());
    r.run_dir = dir / "elsewhere";
    CHECK(resolve_run(r).exp.run_dir == dir / "elsewhere");
  }
  SUBCASE("--resume of a path that is not there") {
    r.resume = dir / "nope";
    CHECK_THROWS_AS(resolve_run(r), CheckpointError);
  }
  SUBCASE("a run directory without a checkpoint: refused alone, started with its config") {
    fs::create_directories(run_dir);
    r.resume = run_dir;
    CHECK_THROWS_AS(resolve_run(r), CheckpointError);
    r.config = write_config(dir, run_dir);
    r.resume = "";  // `trainrun CONFIG --resume`: the config's run directory
    auto [exp, file, step, use, notes] = resolve_run(r);
    CHECK(file.empty());
    CHECK(exp.run_dir == run_dir);
  }
  SUBCASE("a run directory: its newest good checkpoint and the config stored in it") {
    r.config = write_config(dir, run_dir);
    const Experiment original = resolve_run(r).exp;
    save_checkpoint_folder(original, 4);
    const std::string newest = save_checkpoint_folder(original, 8);
    RunRequest resume;
    resume.resume = run_dir;
    resume.sets = {"train.steps=20"};
    auto [exp, file, step, use, notes] = resolve_run(resume);
    CHECK(file == newest);
    CHECK(exp.name == "resume-test");
    CHECK(exp.train.steps == 20);
    CHECK(fs::equivalent(exp.run_dir, run_dir));
    // A damaged newest checkpoint is passed over for the one before it.
    std::ofstream(fs::path(newest) / "rank-00000-of-00001.h5", std::ios::trunc) << "not hdf5";
    CHECK(resolve_run(resume).resume_file == checkpoint_path(run_dir, 4));
  }
  SUBCASE("a checkpoint folder: that folder; the run directory is the one holding it") {
    r.config = write_config(dir, run_dir);
    const std::string folder = save_checkpoint_folder(resolve_run(r).exp, 4);
    RunRequest resume;
    resume.resume = folder;
    auto [exp, got, step, use, notes] = resolve_run(resume);
    CHECK(got == folder);
    CHECK(step == 4);
    CHECK(fs::equivalent(exp.run_dir, run_dir));
    // A folder whose save never finished is an error, not a silent fresh start.
    fs::remove(fs::path(folder) / "MANIFEST");
    CHECK_THROWS_WITH_AS(resolve_run(resume), doctest::Contains("no MANIFEST"), CheckpointError);
  }
  SUBCASE("a checkpoint file: that file; the run directory is the one holding it") {
    r.config = write_config(dir, run_dir);
    const std::string file = save_checkpoint(resolve_run(r).exp, 4);
    RunRequest resume;
    resume.resume = file;
    auto [exp, got, step, use, notes] = resolve_run(resume);
    CHECK(got == file);
    CHECK(fs::equivalent(exp.run_dir, run_dir));
    resume.run_dir = dir / "other";
    CHECK(resolve_run(resume).exp.run_dir == dir / "other");
    // A damaged file given by name is an error, not a silent fresh start.
    std::ofstream(file, std::ios::trunc) << "not hdf5";
    CHECK_THROWS_AS(resolve_run(resume), CheckpointError);
  }
}

TEST_CASE("check_memory refuses what cannot fit, with the numbers") {
  Experiment small;
  CHECK_NOTHROW(check_memory(small));
  Experiment huge;
  huge.model.d_model = 8192;
  huge.model.n_layer = 48;
  huge.model.n_head = 64;
  huge.model.vocab_size = 50304;
  try {
    check_memory(huge);
    FAIL("a 39-billion-parameter model fits?");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("GiB per rank") != std::string::npos);
    CHECK(what.find("this machine") != std::string::npos);
    CHECK(what.find("trainrun plan") != std::string::npos);
  }
}

TEST_CASE("inspect_run_dir tells trainrun's directories from a user's") {
  TempDir dir;
  CHECK(inspect_run_dir(dir / "nope").kind == RunDirKind::missing);
  fs::create_directories(dir / "empty");
  CHECK(inspect_run_dir(dir / "empty").kind == RunDirKind::empty);
  touch(dir.path / "failed" / "config.yaml");
  touch(dir.path / "failed" / "logs" / "rank-0.log");
  CHECK(inspect_run_dir(dir / "failed").kind == RunDirKind::unused);
  touch(dir.path / "ran" / "metrics.jsonl");
  CHECK(inspect_run_dir(dir / "ran").kind == RunDirKind::run);
  CHECK_FALSE(inspect_run_dir(dir / "ran").checkpoints);
  Experiment e;
  e.run_dir = dir / "ckpt";
  save_checkpoint(e, 40);
  const RunDirState ran = inspect_run_dir(dir / "ckpt");
  CHECK(ran.kind == RunDirKind::run);
  CHECK(ran.what == "checkpoints up to step 40");
  CHECK(ran.checkpoints);
  // A user's files, even beside a config.yaml: not trainrun's.
  touch(dir.path / "mine" / "config.yaml");
  CHECK(inspect_run_dir(dir / "mine").kind == RunDirKind::foreign);
  touch(dir.path / "mine" / "notes.txt");
  touch(dir.path / "mine" / "logs" / "x");
  const RunDirState mine = inspect_run_dir(dir / "mine");
  CHECK(mine.kind == RunDirKind::foreign);
  CHECK(mine.what == "notes.txt");
  touch(dir / "afile");
  CHECK(error_of([&] { inspect_run_dir(dir / "afile"); }).find("is a file") != std::string::npos);
}

TEST_CASE("check_run_dir_use: a new run never lands on another run or a user's files") {
  const RunDirState run{RunDirKind::run, "checkpoints up to step 8", false, false, true};
  const RunDirState foreign{RunDirKind::foreign, "notes.txt"};
  for (RunDirKind ok : {RunDirKind::missing, RunDirKind::empty, RunDirKind::unused})
    CHECK_NOTHROW(check_run_dir_use("d", {ok, ""}, RunDirUse::start, false));
  const std::string taken = error_of([&] { check_run_dir_use("d", run, RunDirUse::start, false); });
  CHECK(taken.find("already holds a run (checkpoints up to step 8)") != std::string::npos);
  CHECK(taken.find("--resume d") != std::string::npos);
  CHECK(taken.find("--new") != std::string::npos);
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::start, true));
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::restart, false));  // a requeued job
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::resume, false));
  // A run killed before its first checkpoint has nothing to continue: the advice is a restart
  // (the same command with --resume) or --new, never "continue it".
  const RunDirState attempt{RunDirKind::run, "the metrics of a run that wrote no checkpoint"};
  const std::string again =
      error_of([&] { check_run_dir_use("d", attempt, RunDirUse::start, false); });
  CHECK(again.find("wrote no checkpoint") != std::string::npos);
  CHECK(again.find("start it again from step 0 by adding --resume to this command") !=
        std::string::npos);
  CHECK(again.find("--new") != std::string::npos);
  CHECK(again.find("continue it") == std::string::npos);
  const std::string user =
      error_of([&] { check_run_dir_use("d", foreign, RunDirUse::start, false); });
  CHECK(user.find("trainrun did not make it (it holds notes.txt)") != std::string::npos);
  CHECK_FALSE(
      error_of([&] { check_run_dir_use("d", foreign, RunDirUse::restart, false); }).empty());
  CHECK_NOTHROW(check_run_dir_use("d", foreign, RunDirUse::start, true));
}

TEST_CASE("RunDirLock: one holder at a time, named; the kernel releases a dead holder's") {
  TempDir dir;
  const std::string d = dir / "run";
  {
    RunDirLock lock = RunDirLock::take(d);  // creates the directory
    CHECK(lock.held());
    CHECK(fs::is_directory(d));
    const std::string holder = run_dir_lock_holder(d);
    CHECK(holder.find(fmt::format("pid {} on ", getpid())) != std::string::npos);
    // A second open file description conflicts, in this process as in any other.
    const std::string second = error_of([&] { RunDirLock::take(d); });
    CHECK(second.find("in use by another trainrun: pid " + std::to_string(getpid())) !=
          std::string::npos);
    // --dry-run says what a real run would meet and refuses nothing.
    const std::string said = run_dir_objection(d, RunDirUse::resume, false);
    CHECK(said.find("in use by another trainrun") != std::string::npos);
    RunDirLock moved = std::move(lock);
    CHECK(moved.held());
    CHECK_FALSE(lock.held());
    CHECK_FALSE(run_dir_lock_holder(d).empty());
  }
  CHECK(run_dir_lock_holder(d).empty());
  // A holder killed with SIGKILL leaves the lock file, not the lock.
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  if (child == 0) {
    RunDirLock held = RunDirLock::take(d);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) std::_Exit(1);
    pause();
    std::_Exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  CHECK(run_dir_lock_holder(d).find(fmt::format("pid {} on ", child)) != std::string::npos);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  CHECK(run_dir_lock_holder(d).empty());
  CHECK(RunDirLock::take(d).held());
}

TEST_CASE("RunDirLock: unusable directories say why") {
  TempDir dir;
  touch(dir / "afile");
  CHECK(error_of([&] { RunDirLock::take(dir / "afile"); }).find("is a file") != std::string::npos);
  CHECK(error_of([&] { RunDirLock::take(dir.path / "afile" / "run"); }).find("is a file") !=
        std::string::npos);
  const std::string long_name = dir / std::string(300, 'x');
  CHECK(error_of([&] { RunDirLock::take(long_name); }).find("longer than the file system") !=
        std::string::npos);
}

TEST_CASE("claim_run_dir --new archives trainrun's files only; the lock file stays") {
  TempDir dir;
  const std::string d = dir / "run";
  Experiment e;
  e.run_dir = d;
  save_checkpoint(e, 4);
  touch(fs::path(d) / "config.yaml", "old");
  touch(fs::path(d) / "metrics.jsonl");
  touch(fs::path(d) / "slurm-17.out");
  touch(fs::path(d) / "notes.txt", "mine");
  CHECK_THROWS_AS(claim_run_dir(d, RunDirUse::start, false), RunDirError);
  CHECK(fs::exists(fs::path(d) / "config.yaml"));  // refused before anything moved
  CHECK_FALSE(fs::exists(fs::path(d) / kRunDirLockFile));
  {
    RunDirLock lock = claim_run_dir(d, RunDirUse::start, true);
    CHECK(lock.held());
  }
  std::vector<std::string> archives;
  for (const auto& entry : fs::directory_iterator(d))
    if (entry.path().filename().string().rfind("archive-", 0) == 0)
      archives.push_back(entry.path().string());
  REQUIRE(archives.size() == 1);
  const fs::path a = archives[0];
  CHECK(fs::exists(a / "checkpoints" / "step-0000004.h5"));
  CHECK(fs::exists(a / "config.yaml"));
  // Copied, not moved: it may be the CONFIG of the very run being started (`trainrun
  // RUN_DIR/config.yaml --run-dir RUN_DIR --new`), which its ranks read after the archive.
  CHECK(fs::exists(fs::path(d) / "config.yaml"));
  CHECK(fs::exists(a / "metrics.jsonl"));
  CHECK(fs::exists(a / "slurm-17.out"));
  CHECK(fs::exists(fs::path(d) / "notes.txt"));  // the user's file stays where it was
  CHECK(fs::exists(fs::path(d) / kRunDirLockFile));
  CHECK_FALSE(fs::exists(fs::path(d) / "checkpoints"));
  // Now an unused directory of trainrun's (with a user's file: foreign without --new).
  CHECK(inspect_run_dir(d).kind == RunDirKind::foreign);
  fs::remove(fs::path(d) / "notes.txt");
  CHECK(inspect_run_dir(d).kind == RunDirKind::unused);
  CHECK(claim_run_dir(d, RunDirUse::start, false).held());
}

TEST_CASE("run_dir_of_checkpoint: only a checkpoints/ folder of trainrun's own directory") {
  TempDir dir;
  Experiment e;
  e.run_dir = dir / "run";
  const std::string inside = save_checkpoint(e, 4);
  CHECK(run_dir_of_checkpoint(inside) == fs::absolute(e.run_dir).lexically_normal().string());
  fs::create_directories(dir / "loose");
  fs::copy_file(inside, dir.path / "loose" / "step-0000004.h5");
  CHECK_FALSE(run_dir_of_checkpoint(dir.path / "loose" / "step-0000004.h5"));
  // A checkpoints/ folder among a user's own files is not a run directory either.
  e.run_dir = dir / "project";
  const std::string theirs = save_checkpoint(e, 4);
  touch(dir.path / "project" / "paper.tex");
  CHECK_FALSE(run_dir_of_checkpoint(theirs));
}

TEST_CASE("resolve_run: a checkpoint from outside a run directory starts a new one") {
  TempDir dir;
  RunRequest r;
  r.config = write_config(dir, dir / "run");
  const Experiment original = resolve_run(r).exp;
  const std::string inside = save_checkpoint(original, 4);
  fs::create_directories(dir / "elsewhere");
  const fs::path outside = dir.path / "elsewhere" / "ckpt.h5";
  fs::copy_file(inside, outside);

  RunRequest resume;
  resume.resume = outside.string();
  ResolvedRun got = resolve_run(resume);
  CHECK(got.use == RunDirUse::start);
  CHECK(got.resume_file == outside.string());
  CHECK(got.resume_step == 4);
  CHECK(got.exp.run_dir == fs::path(dir / "run").lexically_normal().string() + "-from-step-4");
  REQUIRE(got.notes.size() == 1);
  CHECK(got.notes[0].find("outside a run directory") != std::string::npos);
  CHECK(got.notes[0].find(got.exp.run_dir) != std::string::npos);
  resume.run_dir = dir / "mine";
  got = resolve_run(resume);
  CHECK(got.use == RunDirUse::start);
  CHECK(got.exp.run_dir == dir / "mine");

  // A relative path works; inside its run directory it continues that run.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path);
  RunRequest relative;
  relative.resume = "run/checkpoints/step-0000004.h5";
  got = resolve_run(relative);
  fs::current_path(cwd);
  CHECK(got.use == RunDirUse::resume);
  CHECK(fs::equivalent(got.exp.run_dir, dir / "run"));
  fs::current_path(dir / "elsewhere");
  relative.resume = "ckpt.h5";
  ResolvedRun loose;
  CHECK_NOTHROW(loose = resolve_run(relative));
  fs::current_path(cwd);
  CHECK(loose.use == RunDirUse::start);
  CHECK(loose.exp.run_dir.find("-from-step-4") != std::string::npos);
}

TEST_CASE("resolve_run: a CONFIG given with --resume must describe the resumed run") {
  TempDir dir;
  RunRequest r;
  r.config = write_config(dir, dir / "run");
  save_checkpoint_folder(resolve_run(r).exp, 4);
  RunRequest resume;
  resume.config = r.config;
  resume.resume = "";
  ResolvedRun same = resolve_run(resume);
  CHECK(same.resume_file == checkpoint_path(dir / "run", 4));
  CHECK(same.notes.empty());
  // A key a resume may change is taken from CONFIG, and said.
  resume.sets = {"train.steps=30"};
  ResolvedRun more = resolve_run(resume);
  CHECK(more.exp.train.steps == 30);
  resume.sets.clear();
  std::ofstream(dir / "other.yaml") << "name: resume-test\nrun_dir: " << (dir / "run")
                                    << "\ntrain:\n  steps: 25\ndata:\n  synthetic: markov\n";
  resume.config = dir / "other.yaml";
  more = resolve_run(resume);
  CHECK(more.exp.train.steps == 25);
  REQUIRE(more.notes.size() == 1);
  CHECK(more.notes[0].find("train.steps=25") != std::string::npos);
  // Any other difference: refused, naming the key.
  std::ofstream(dir / "other.yaml", std::ios::trunc)
      << "name: resume-test\nrun_dir: " << (dir / "run")
      << "\nmodel:\n  d_model: 32\ntrain:\n  steps: 10\ndata:\n  synthetic: markov\n";
  CHECK_THROWS_WITH_AS(resolve_run(resume), doctest::Contains("model.d_model"), ConfigError);
}

TEST_CASE("checkpoints: trainrun removes only files it can tell are its own") {
  TempDir dir;
  const fs::path ck = dir.path / "checkpoints";
  touch(ck / "step-0000001.h5", "a user's file, not HDF5");  // older than everything saved
  touch(ck / "step-1.h5", "not a name trainrun writes");
  touch(ck / "notes.tmp-1", "mine");
  // A checkpoint write's temporary whose writer is dead is trainrun's, and goes.
  const pid_t dead = fork();
  if (dead == 0) std::_Exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path stale = ck / fmt::format("step-0000002.h5.tmp-{}", dead);
  touch(stale, "half a checkpoint");
  {
    Checkpointer writer(dir.str(), 1, false);
    for (int64_t step : {3, 4}) {
      writer.save(tiny_snapshot(step, "name: x\n"));
      writer.commit(step, 1);
    }
  }
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 4),
                                 single_file_checkpoint_path(dir.str(), 1)});
  CHECK(latest_good_checkpoint(dir.str(), nullptr) == checkpoint_path(dir.str(), 4));
  CHECK(fs::exists(ck / "step-0000001.h5"));  // damaged or not, it is not trainrun's
  CHECK(fs::exists(ck / "step-1.h5"));
  CHECK(fs::exists(ck / "notes.tmp-1"));
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), 3)));  // pruned: keep_last 1
}
