// The command line (CLI11). Kept in one file: CLI11 is slow to compile.
// Every subcommand parses its arguments here and calls one function of a library concept; no
// policy lives here (the run command's is in launch/run_command.h).
#include "trainrun/cli/cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/cluster/cluster.h"
#include "trainrun/config/config.h"
#include "trainrun/core/build_info.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/experiment.h"
#include "trainrun/data/data.h"
#include "trainrun/data/inspect.h"
#include "trainrun/data/output_files.h"
#include "trainrun/data/tokenizer.h"
#include "trainrun/hf/hf_export.h"
#include "trainrun/hf/hf_import.h"
#include "trainrun/launch/launch.h"
#include "trainrun/launch/run_command.h"
#include "trainrun/obs/provenance.h"
#include "trainrun/plan/layout_search.h"
#include "trainrun/plan/plan.h"
#include "trainrun/preflight/preflight.h"
#include "trainrun/report/compare.h"
#include "trainrun/report/report.h"
#include "trainrun/report/run_index.h"
#include "trainrun/runtime/omp_threads.h"
#include "trainrun/sweep/sweep.h"
#include "trainrun/train/sampler.h"
#include "trainrun/train/trainer.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

const char* kDescription =
    "trainrun: train GPT, Llama and MLP language models from a YAML experiment, on CPU or\n"
    "CUDA, data-parallel over MPI/NCCL, with HDF5 checkpoints and metric logs.\n\n"
    "  trainrun CONFIG.yaml [--set KEY=VALUE]...   train (same as `trainrun run CONFIG`)\n"
    "  trainrun --resume RUN_DIR|CHECKPOINT         continue a run where it stopped\n"
    "  trainrun CONFIG.yaml --dry-run               print the resolved run, start nothing\n"
    "  trainrun CONFIG.yaml --new                   archive a finished run there, start anew\n"
    "  trainrun CONFIG.yaml --profile A:B           Chrome traces of steps A..B-1\n"
    "  trainrun sweep CONFIG.yaml --grid K=A,B      one run per point; `trainrun compare DIR`\n"
    "  (every option of a run: `trainrun run --help`)\n\n"
    "Exit codes: 0 ok, 1 internal error, 2 bad usage or config, 3 bad data, 4 no usable\n"
    "checkpoint, 5 device unavailable, 6 launch failure, 7 gave up, 8 the watchdog aborted a\n"
    "hang, 73 run directory unusable (holds another run, in use, not writable), 75 stopped by\n"
    "SIGTERM/SIGUSR1 after a checkpoint (resume me), 130 interrupted, 128+N killed by signal N.\n"
    "See man trainrun.";

// A numeric option's value: a finite number above `min` (or at least it, with `min_allowed`).
// CLI11's PositiveNumber and NonNegativeNumber let nan through (every comparison with it is
// false), so `--disk-bw nan` was accepted and ignored, and they call inf "not in range 0 to
// 1797...". `example` is a value that works, for the message.
CLI::Validator finite_number(double min, bool min_allowed, const std::string& unit,
                             const std::string& example) {
  const std::string rule = fmt::format("a finite number {} {:g}", min_allowed ? ">=" : ">", min);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() && *end == '\0' && std::isfinite(v) &&
            (v > min || (min_allowed && v == min)))
          return "";
        return fmt::format("{}: must be {} ({}), e.g. {}", s, rule, unit, example);
      },
      rule);
}

// One subcommand: the CLI11 node that says whether it was given, and what it runs. Each add_*
// function owns its arguments through the closure.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// A config and its --set overrides: what most commands start from.
struct ConfigArgs {
  std::string config;
  std::vector<std::string> sets;
  Experiment load() const { return load_experiment(config, sets, hf_model_source); }
  // plan and validate take a Hugging Face model folder too: its model, synthetic data unless
  // --set names data (hf_import.h).
  Experiment load_or_hf() const {
    return is_hf_model_dir(config) ? hf_experiment(config, sets) : load();
  }
};

void add_config_options(CLI::App* sub, ConfigArgs& a, bool hf = false) {
  sub->add_option("config", a.config,
                  hf ? "experiment YAML file, or a Hugging Face model folder (its model)"
                     : "experiment YAML file")
      ->required();
  sub->add_option("--set", a.sets, "override a config key: KEY=VALUE");
}

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunRequest>();
  auto* sub = app.add_subcommand("run", "train an experiment (the default command)");
  sub->add_option("config", a->config, "experiment YAML file")->type_name("CONFIG");
  sub->add_option("--set", a->sets, "override a config key: KEY=VALUE (VALUE is YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option("--run-dir", a->run_dir, "run directory (default: run_dir, or runs/NAME)");
  auto* resume =
      sub->add_option("--resume", a->resume,
                      "resume from RUN_DIR (newest good checkpoint) or a checkpoint FILE; with "
                      "CONFIG and no value, the config's run directory (started fresh when it "
                      "has none)")
          ->expected(0, 1)
          ->type_name("[RUN_DIR|FILE]");
  sub->add_flag("--new", a->renew,
                "start a new run in a run directory that holds an earlier run (its files move "
                "into RUN_DIR/archive-TIME/) or other files (left alone)")
      ->excludes(resume);
  sub->add_flag("--dry-run", a->dry_run,
                "validate and print what would run (the mpirun command, or the resolved "
                "config); writes nothing, and says what a real run would be refused for in the "
                "run directory instead of refusing");
  sub->add_option("--profile", a->profile,
                  "write Chrome traces and a per-op time table for steps A:B into RUN_DIR/trace/")
      ->type_name("A:B");
  return {sub, [a] {
            return run_command(*a, [a](const Experiment& exp, const std::string& resume_file) {
              RunOptions opts;
              opts.resume_file = resume_file;
              opts.profile = a->profile;
              return run_training(exp, opts);
            });
          }};
}

Command add_validate(CLI::App& app) {
  auto a = std::make_shared<ConfigArgs>();
  auto* sub = app.add_subcommand("validate", "check a config and print it resolved");
  add_config_options(sub, *a, /*hf=*/true);
  return {sub, [a] {
            Experiment exp = a->load_or_hf();
            validate_for_world(exp, exp.world_size());
            check_memory(exp);
            check_data(exp);
            fmt::print("{}", to_yaml(exp));
            fmt::print(stderr,
                       "{}: OK ({} rank(s); data opened, memory fits this machine; not checked: "
                       "the device; `trainrun {} --dry-run` also checks mpirun, its slots and "
                       "the run directory)\n",
                       a->config, exp.world_size(), a->config);
            return kExitOk;
          }};
}

Command add_plan(CLI::App& app) {
  struct Args : ConfigArgs {
    std::string gpu;
    bool json = false;
    double disk_bw = 0;        // MB/s; 0 = the assumed rate (device_peaks.cpp)
    double link_bw = 0;        // MB/s; 0 = the table's or the assumed link
    double link_latency = -1;  // microseconds; < 0 = the assumed latency
    bool search = false;
    int top = 5;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "plan", "what a run will cost before it runs: parameters, FLOPs, memory, time");
  add_config_options(sub, *a, /*hf=*/true);
  sub->add_flag("--json", a->json, "print JSON (for scripts)");
  sub->add_option("--gpu", a->gpu, "plan for this GPU: A100, H100 or H200 (device cuda)");
  sub->add_flag("--search", a->search,
                "plan every layout of the config's ranks (distributed.tp, zero, dp_replicate, "
                "train.activation_checkpointing, micro_batch_size) and list those that fit, "
                "fastest first");
  sub->add_option("--top", a->top, "--search: how many layouts to list (0: all; default 5)")
      ->check(CLI::Range(0, 1000000));
  sub->add_option("--disk-bw", a->disk_bw,
                  "MB/s one rank writes a checkpoint at (default: an assumed rate, printed in "
                  "the plan; measure with build/bench/bench_checkpoint DIR)")
      ->type_name("MBPS")
      ->check(finite_number(0, false, "MB/s", "--disk-bw 2000"));
  sub->add_option("--link-bw", a->link_bw,
                  "MB/s per rank, one direction, of the link this run's collectives cross (the "
                  "network between nodes, or within a node with one node); default: the "
                  "device table's or an assumed rate, printed in the plan")
      ->type_name("MBPS")
      ->check(finite_number(0, false, "MB/s", "--link-bw 12500 for 100 Gb/s"));
  sub->add_option("--link-latency", a->link_latency,
                  "microseconds per hop of that link (default: assumed, printed in the plan)")
      ->type_name("US")
      ->check(finite_number(0, true, "microseconds", "--link-latency 5"));
  return {sub, [a] {
            Experiment exp = a->load_or_hf();
            DevicePeak peak = device_peak(exp, a->gpu);
            set_link(peak, exp.distributed.nodes > 1, a->link_bw * 1e6,
                     a->link_latency < 0 ? -1 : a->link_latency * 1e-6);
            if (a->disk_bw > 0) {
              peak.disk_bw = a->disk_bw * 1e6;
              peak.disk_source = fmt::format("{:g} MB/s per rank (--disk-bw)", a->disk_bw);
            }
            if (a->search) {
              const LayoutSearch s = search_layouts(exp, peak);
              fmt::print("{}", a->json ? layouts_json(s, a->top) : layouts_text(s, a->top));
              return kExitOk;
            }
            Plan p = make_plan(exp, peak);
            fmt::print("{}", a->json ? plan_json(p) : plan_text(p));
            return kExitOk;
          }};
}

Command add_report(CLI::App& app) {
  struct Args {
    std::string dir, out;
    bool html = false, force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("report", "summarise a run and plot its metrics");
  sub->add_option("run_dir", a->dir, "run directory")->required();
  sub->add_option("--out", a->out, "PNG to write (default RUN_DIR/report.png)");
  sub->add_flag("--force", a->force, "replace --out if it exists");
  sub->add_flag("--html", a->html, "also write RUN_DIR/report.html, a self-contained page");
  return {sub, [a] {
            // --out may point anywhere: the rule for files outside the run directory.
            if (!a->out.empty())
              check_outputs({(fs::path(a->dir) / "metrics.jsonl").string(),
                             (fs::path(a->dir) / "config.yaml").string()},
                            {a->out}, a->force, "report");
            // What a run directory holds may drive a terminal (an event's cause, a path).
            fmt::print("{}", printable(report_text(a->dir)));
            if (a->html) fmt::print("html: {}\n", printable(write_report_html(a->dir)));
            fmt::print("plot: {}\n", printable(write_report_plot(a->dir, a->out)));
            return kExitOk;
          }};
}

Command add_sweep(CLI::App& app) {
  auto a = std::make_shared<SweepRequest>();
  auto* sub = app.add_subcommand(
      "sweep", "train a config over axes of values, each point its own run (docs/sweeps.md)");
  sub->add_option("config", a->config, "experiment YAML file")->type_name("CONFIG");
  sub->add_option("--set", a->sets, "override a config key in every point: KEY=VALUE")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option("--grid", a->grid,
                  "an axis: KEY=V1,V2,... (values as --set parses them); several form the product")
      ->type_name("KEY=V1,V2")
      ->allow_extra_args(false);
  sub->add_flag("--list", a->list, "zip the --grid axes value by value instead of the product");
  sub->add_option("--random", a->random,
                  "a random axis: KEY=loguniform(A,B), uniform(A,B) or choice(V1,V2,...)")
      ->type_name("KEY=DIST")
      ->allow_extra_args(false);
  sub->add_option("--trials", a->trials, "draws of the --random axes (default 1)")
      ->check(CLI::Range(1, 100000));
  sub->add_option("--sweep-seed", a->sweep_seed, "seed of the --random draws (default 0)");
  sub->add_option("--seeds", a->seeds, "the config's seed, seed+1, ...: N seeds of every point")
      ->check(CLI::Range(1, 100000));
  sub->add_option("--sweep-file", a->sweep_file,
                  "axes from a YAML file's `sweep:` (grid, list, random, trials, sweep_seed, "
                  "seeds, set); the command line's add to them")
      ->type_name("FILE");
  sub->add_option("--sweep-dir", a->sweep_dir, "the sweep directory (default runs/NAME-sweep)");
  sub->add_option("--resume", a->resume,
                  "run the points of SWEEP_DIR that are not done (preempted and failed ones "
                  "continue from their checkpoints)")
      ->type_name("SWEEP_DIR");
  sub->add_option("--parallel", a->parallel, "points trained side by side (the cores split)")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--dry-run", a->dry_run, "validate and plan every point, print them, run nothing");
  sub->add_flag("--slurm", a->slurm,
                "write SWEEP_DIR/sweep.sbatch, one job array (a task per point, --parallel at "
                "once) instead of running the points here");
  sub->add_flag("--submit", a->submit, "with --slurm: submit the job array with sbatch");
  return {sub, [a] { return run_sweep(*a); }};
}

Command add_compare(CLI::App& app) {
  struct Args {
    std::vector<std::string> paths;
    CompareOptions opt;
    bool json = false, csv = false, force = false;
    std::string html;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "compare", "one table of runs: the config keys that differ, status and final figures");
  sub->add_option("runs", a->paths, "run directories, sweep directories, or directories of runs")
      ->required()
      ->type_name("RUN_OR_SWEEP");
  sub->add_option("--sort", a->opt.sort,
                  "best first by a figure: steps, train_loss, best_val_loss, last_val_loss, "
                  "tokens_per_sec, mfu, seconds");
  sub->add_flag("--group-seeds", a->opt.group_seeds,
                "one row per setting: the mean and standard error over its seeds");
  auto* json = sub->add_flag("--json", a->json, "JSON instead of a table");
  sub->add_flag("--csv", a->csv, "CSV instead of a table")->excludes(json);
  sub->add_option("--html", a->html,
                  "also write one self-contained page: the table and every run's curves")
      ->type_name("FILE");
  sub->add_flag("--force", a->force, "replace --html's FILE if it exists");
  return {sub, [a] {
            a->opt.format = a->json  ? CompareFormat::json
                            : a->csv ? CompareFormat::csv
                                     : CompareFormat::table;
            if (!a->html.empty()) check_outputs({}, {a->html}, a->force, "compare");
            fmt::print("{}", printable(compare_runs(a->paths, a->opt)));
            if (!a->html.empty()) {
              write_compare_html(a->paths, a->opt, a->html);
              fmt::print(stderr, "html: {}\n", printable(a->html));
            }
            return kExitOk;
          }};
}

Command add_runs(CLI::App& app) {
  struct Args {
    std::string dir = "runs";
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "runs", "list the runs in a directory: status, steps, best val loss, last update, sweep");
  sub->add_option("dir", a->dir, "the directory that holds the runs (default runs/)")
      ->type_name("DIR");
  sub->add_flag("--json", a->json, "JSON instead of a table");
  return {sub, [a] {
            fmt::print("{}", printable(list_runs(a->dir, a->json)));
            return kExitOk;
          }};
}

// The run's resolved config.yaml as the config of a new run in --run-dir; the run's provenance
// record says which commit made it, and a different one here is said before anything starts.
Command add_reproduce(CLI::App& app) {
  auto a = std::make_shared<RunRequest>();
  auto* sub = app.add_subcommand(
      "reproduce", "start a run's experiment again, from its recorded config, in a new directory");
  sub->add_option("run_dir", a->config, "the run to reproduce")->required()->type_name("RUN_DIR");
  sub->add_option("--run-dir", a->run_dir, "the new run's directory")->required();
  sub->add_flag("--dry-run", a->dry_run, "validate and print what would run; write nothing");
  return {sub, [a] {
            const std::string from = a->config;
            a->config = (fs::path(from) / "config.yaml").string();
            std::error_code ec;
            if (!fs::is_regular_file(a->config, ec))
              throw ConfigError(
                  fmt::format("reproduce {}: no config.yaml there; name a run "
                              "directory",
                              from));
            if (const auto p = read_provenance(from); p && !p->attempts.empty()) {
              const std::string& made_by = p->attempts.front().source_commit;
              if (made_by != source_commit())
                fmt::print(stderr,
                           "warning: {} was made by trainrun built from {}, this one from {}: "
                           "the numbers may differ\n",
                           printable(from), printable(made_by), source_commit());
            } else {
              fmt::print(stderr,
                         "warning: {} has no provenance record: which trainrun made it is "
                         "unknown\n",
                         printable(from));
            }
            return run_command(*a, [a](const Experiment& exp, const std::string& resume_file) {
              RunOptions opts;
              opts.resume_file = resume_file;
              return run_training(exp, opts);
            });
          }};
}

Command add_data_prepare(CLI::App& app) {
  auto a = std::make_shared<PrepareRequest>();
  auto* data = app.add_subcommand("data", "data tools");
  data->require_subcommand(1);
  auto* sub = data->add_subcommand(
      "prepare", "turn text files into token shards (byte-level, or with --tokenizer)");
  sub->add_option("text", a->texts,
                  "input text files, or directories (their files, sorted): each file is a "
                  "document")
      ->required();
  sub->add_option_function<std::string>(
         "--eot",
         [a](const std::string& v) {
           if (v == "none") {
             a->eot = kEotNone;
             return;
           }
           char* end = nullptr;
           errno = 0;
           const long long id = std::strtoll(v.c_str(), &end, 10);
           if (v.empty() || *end != '\0' || errno != 0 || id < 0 || id > INT32_MAX)
             throw CLI::ValidationError("--eot", "must be a token id (0 or more) or `none`");
           a->eot = id;
         },
         "the id written between documents (default: 0 for bytes, the tokenizer's "
         "<|endoftext|> if it has one), or `none`")
      ->type_name("ID|none");
  sub->add_option("--out", a->out_dir,
                  "output directory for train.bin, val.bin and their document indexes (.idx)")
      ->required();
  sub->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json to encode with (also writes manifest.json)");
  sub->add_option("--threads", a->threads, "encoding threads (default: all cores)")
      ->check(CLI::Range(0, kMaxThreads));
  sub->add_flag("--force", a->force,
                "replace shards, manifest and tokenizer copy that exist; start an interrupted "
                "prepare over instead of continuing it");
  sub->add_option("--val-fraction", a->val_fraction,
                  "fraction held out for validation, in (0, 0.9]")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (end == s.c_str() || *end != '\0' || !(v > 0.0 && v <= 0.9))
              return s + ": must be in (0, 0.9]: the share of the text held out for validation";
            return "";
          },
          "(0, 0.9]"));
  return {sub, [a] {
            // Test only (tests/integration/test_prepare_resume.py): SIGKILL once N inputs are
            // journaled, at the next boundary, to test what a killed prepare leaves.
            if (const char* n = std::getenv("TRAINRUN_PREPARE_STOP_AFTER"); n && *n) {
              a->stop_after_inputs = std::strtoll(n, nullptr, 10);
              a->stop_kills = true;
            }
            fmt::print("{}\n", prepare_shards(*a));
            return kExitOk;
          }};
}

// `data inspect CONFIG|PATH` (add_data_prepare makes the `data` node).
Command add_data_inspect(CLI::App& app) {
  struct Args : ConfigArgs {
    InspectRequest req;
    int seq_len = 64;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.get_subcommand("data")->add_subcommand(
      "inspect",
      "what a config's training data (or a shard path) holds: tokens, vocabulary, "
      "documents, the mixture's proportions, the first samples decoded");
  sub->add_option("path", a->config,
                  "an experiment YAML (its data, as the run reads it) or a shard file, "
                  "directory or glob")
      ->required();
  sub->add_option("--set", a->sets, "override a config key: KEY=VALUE (with a config)");
  sub->add_option("--samples", a->req.samples, "first samples to decode")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub->add_option("--eot", a->req.eot,
                  "the end-of-text id between documents (default: the tokenizer's "
                  "<|endoftext|>, if it has one)")
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}));
  sub->add_option("--seq-len", a->seq_len, "sample length for a shard path (a config has its own)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--json", a->req.json, "print JSON (for scripts)");
  return {sub, [a] {
            const std::string ext = fs::path(a->config).extension().string();
            if (ext == ".yaml" || ext == ".yml") {
              fmt::print("{}", inspect_data(a->load(), a->req));
            } else {
              if (!a->sets.empty())
                throw ConfigError(fmt::format(
                    "data inspect {}: --set applies to a config (a .yaml file), not to shards",
                    a->config));
              fmt::print("{}", inspect_shards(a->config, a->seq_len, a->req));
            }
            return kExitOk;
          }};
}

// `data tokenizer train|encode|decode` (add_data_prepare makes the `data` node).
Command add_data_tokenizer(CLI::App& app) {
  struct Args {
    std::vector<std::string> texts;
    std::string tokenizer, out, ids_file;
    int vocab_size = 0, threads = 0;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.get_subcommand("data")->add_subcommand("tokenizer", "byte-level BPE tokenizers");
  sub->require_subcommand(1);
  auto* train = sub->add_subcommand("train", "learn a byte-level BPE tokenizer from text files");
  train->add_option("text", a->texts, "input text files")->required();
  train->add_option("--vocab-size", a->vocab_size, "tokens, the 256 bytes included")->required();
  train->add_option("--out", a->out, "tokenizer.json to write")->required();
  train->add_option("--threads", a->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, kMaxThreads));
  train->add_flag("--force", a->force, "replace --out if it exists");
  auto* enc = sub->add_subcommand("encode", "print the token ids of a text file");
  enc->add_option("tokenizer", a->tokenizer, "tokenizer.json")->required();
  enc->add_option("text", a->out, "text file")->required();
  auto* dec = sub->add_subcommand("decode", "write the bytes of token ids (whitespace-separated)");
  dec->add_option("tokenizer", a->tokenizer, "tokenizer.json")->required();
  dec->add_option("ids", a->ids_file, "file of ids (default: standard input)");
  return {sub, [a, train, enc] {
            if (*train) {
              check_outputs(a->texts, {a->out}, a->force, "data tokenizer train");
              const Tokenizer t = train_tokenizer(a->texts, a->vocab_size, a->threads);
              t.save(a->out);
              fmt::print("wrote {}: {} tokens ({} merges)\n", a->out, t.vocab_size(),
                         t.num_merges());
            } else if (*enc) {
              const auto ids = encode_file(Tokenizer::load(a->tokenizer), a->out);
              fmt::print("{}\n", fmt::join(ids, " "));
            } else {
              const std::string text = decode_ids_text(Tokenizer::load(a->tokenizer), a->ids_file);
              std::fwrite(text.data(), 1, text.size(), stdout);
            }
            return kExitOk;
          }};
}

Command add_sample(CLI::App& app) {
  struct Args {
    std::string run, prompt, tokenizer;
    int tokens = 200;
    double temperature = 0.8;
    uint64_t seed = 1;
    bool ids = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("sample", "generate text from a run's newest checkpoint");
  sub->add_option("run", a->run, "run directory, checkpoint, or a Hugging Face model folder")
      ->required();
  sub->add_option("--prompt", a->prompt, "text to continue");
  sub->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json to encode the prompt and decode with (default: the run's)");
  sub->add_option("--tokens", a->tokens, "how many tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--temperature", a->temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();  // sample_text refuses nan, inf and negatives
  // CLI11 would wrap a negative seed round to a huge unsigned one.
  sub->add_option("--seed", a->seed, "sampling seed")
      ->capture_default_str()
      ->check(finite_number(0, true, "an integer", "--seed 1"));
  sub->add_flag("--ids", a->ids, "print the generated token ids, one line, instead of the text");
  return {sub, [a] {
            if (a->ids) {
              fmt::print("{}\n", fmt::join(sample_ids(a->run, a->prompt, a->tokens, a->temperature,
                                                      a->seed, a->tokenizer),
                                           " "));
              return kExitOk;
            }
            const std::string text =
                sample_text(a->run, a->prompt, a->tokens, a->temperature, a->seed, a->tokenizer);
            fmt::print("{}{}\n", a->prompt, text);
            return kExitOk;
          }};
}

Command add_inspect(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("inspect", "describe a checkpoint and verify its checksums");
  sub->add_option("checkpoint", *file, "checkpoint folder (or an older .h5 file)")->required();
  return {sub, [file] {
            fmt::print("{}", describe_checkpoint(*file));
            return verify_checkpoint(*file).ok ? kExitOk : kExitCheckpoint;
          }};
}

// `export --format hf`: the model in transformers' layout into the folder `out`, which must not
// hold anything yet unless `force`.
ExitCode export_hf(const std::string& from, const std::string& out, const std::string& dtype_name,
                   uint64_t max_shard, bool force) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(out, ec))) {
    if (!std::filesystem::is_directory(std::filesystem::symlink_status(out, ec)))
      throw ConfigError(fmt::format("export --format hf: --out {} is not a folder", out));
    if (!std::filesystem::is_empty(out, ec) && !force)
      throw ConfigError(fmt::format(
          "export --format hf: --out {} is not empty; pass --force to replace its files", out));
  }
  const CheckpointData ck = read_checkpoint(from);
  const Experiment exp = parse_experiment(ck.state.config_yaml, from + ":/config", {});
  const bool bf16 =
      dtype_name.empty() ? exp.train.precision == Precision::bf16 : dtype_name == "bf16";
  const SafeDtype dt = bf16 ? SafeDtype::bf16 : SafeDtype::f32;
  write_hf(out, to_hf(exp, ck, dt), dt, max_shard);
  fmt::print("exported {} (step {}, {} parameters, {}) to {} for transformers\n", from,
             ck.state.step, ck.weights.size(), safe_dtype_name(dt), out);
  return kExitOk;
}

Command add_export(CLI::App& app) {
  struct Args {
    std::string from, out, format = "trainrun", dtype;
    uint64_t max_shard = uint64_t{5'000'000'000};
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "export",
      "write a checkpoint (any format, or a run's newest good one) as one .h5 file, or "
      "(--format hf) as a Hugging Face model folder");
  sub->add_option("checkpoint", a->from, "checkpoint file or folder, or a run directory")
      ->required();
  sub->add_option("--out", a->out,
                  "the single-file checkpoint to write (--format hf: the model folder)")
      ->required();
  sub->add_option("--format", a->format,
                  "trainrun: one .h5 checkpoint; hf: config.json, generation_config.json and "
                  "model.safetensors as transformers reads them (gpt, llama)")
      ->check(CLI::IsMember({"trainrun", "hf"}));
  sub->add_option("--dtype", a->dtype,
                  "--format hf: the weights' dtype (default: bf16 for a bf16 run, else fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--max-shard-size", a->max_shard,
                  "--format hf: split the weights into files of at most this size, with an "
                  "index (default 5GB)")
      ->transform(CLI::AsSizeValue(true));
  sub->add_flag("--force", a->force, "replace --out if it exists");
  return {sub, [a] {
            std::string from = a->from;
            if (is_run_directory(from)) {
              std::vector<std::string> warnings;
              auto good = latest_good_checkpoint(from, &warnings);
              for (const auto& w : warnings) spdlog::warn("{}", w);
              if (!good)
                throw CheckpointError(fmt::format("run {} has no checkpoint that verifies", from));
              from = *good;
            }
            if (a->format == "hf") return export_hf(from, a->out, a->dtype, a->max_shard, a->force);
            check_outputs({from}, {a->out}, a->force, "export");
            const CheckpointData ck = read_checkpoint(from);
            write_checkpoint(a->out, ck);
            fmt::print("exported {} (step {}, {} parameters) to {}\n", from, ck.state.step,
                       ck.weights.size(), a->out);
            return kExitOk;
          }};
}

Command add_slurm(CLI::App& app) {
  struct Args : ConfigArgs {
    SlurmOptions opts;
    bool submit = false;
  };
  auto a = std::make_shared<Args>();
  SlurmOptions& o = a->opts;
  auto* sub = app.add_subcommand("slurm", "print (or --submit) an sbatch script for a config");
  add_config_options(sub, *a);
  sub->add_option("--nodes", o.nodes, "nodes (default: distributed.nodes)");
  sub->add_option("--ntasks-per-node", o.ntasks_per_node,
                  "ranks per node (default: distributed.nproc)");
  sub->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node");
  sub->add_option("--cpus-per-task", o.cpus_per_task, "CPU cores per rank");
  sub->add_option("--time", o.time, "time limit, e.g. 24:00:00");
  sub->add_option("--partition", o.partition, "partition");
  sub->add_option("--account", o.account, "account");
  sub->add_option("--signal-seconds", o.signal_seconds,
                  "seconds before the time limit to checkpoint and requeue")
      ->capture_default_str();
  sub->add_option("--launcher", o.launcher, "how ranks start: srun or mpirun")
      ->check(CLI::IsMember({"srun", "mpirun"}))
      ->capture_default_str();
  sub->add_flag("--submit", a->submit,
                "write RUN_DIR/job.sbatch, submit it with sbatch and print the job id");
  return {sub, [a] {
            Experiment exp = a->load();
            a->opts.trainrun_bin = self_executable();
            if (a->submit) {
              fmt::print("{}\n", slurm_submit(exp, a->opts));
            } else {
              a->opts.config_path = fs::absolute(a->config).string();
              a->opts.sets = a->sets;
              fmt::print("{}", slurm_script(exp, a->opts));
            }
            return kExitOk;
          }};
}

Command add_k8s(CLI::App& app) {
  struct Args : ConfigArgs {
    K8sOptions opts;
  };
  auto a = std::make_shared<Args>();
  K8sOptions& o = a->opts;
  auto* sub = app.add_subcommand("k8s", "print a Kubeflow MPIJob manifest for kubectl apply");
  add_config_options(sub, *a);
  sub->add_option("--nodes", o.nodes, "worker pods (default: distributed.nodes)");
  sub->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per worker pod");
  sub->add_option("--ranks-per-node", o.ranks_per_node,
                  "ranks per worker pod (default: distributed.nproc)");
  sub->add_option("--image", o.image, "container image with trainrun")->capture_default_str();
  sub->add_option("--namespace", o.namespace_, "namespace")->capture_default_str();
  sub->add_option("--pvc", o.pvc, "existing PersistentVolumeClaim for the run directory");
  sub->add_option("--storage", o.storage, "size of the claim created without --pvc")
      ->capture_default_str();
  sub->add_option("--cpu", o.cpu, "CPU limit per worker pod")->capture_default_str();
  sub->add_option("--memory", o.memory, "memory limit per worker pod")->capture_default_str();
  return {sub, [a] {
            fmt::print("{}", k8s_manifest(a->load(), a->opts));
            return kExitOk;
          }};
}

Command add_help(CLI::App& app) {
  auto* sub = app.add_subcommand("help", "print this help");
  return {sub, [&app] {
            // app.help() would describe the selected subcommand, this one.
            fmt::print(
                "{}", app.get_formatter()->make_help(&app, "trainrun", CLI::AppFormatMode::Normal));
            return kExitOk;
          }};
}

// `trainrun CONFIG ...` and `trainrun --resume ...` are `trainrun run ...`.
std::vector<std::string> with_default_command(int argc, char** argv) {
  static const std::set<std::string> kSubcommands = {
      "run",   "validate", "plan",  "report",  "data", "sample",    "inspect", "export",
      "slurm", "k8s",      "sweep", "compare", "runs", "reproduce", "help"};
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() > 1 && !kSubcommands.count(args[1]) && args[1] != "--help" && args[1] != "-h" &&
      args[1] != "--version")
    args.insert(args.begin() + 1, "run");
  return args;
}

// Runs the command given; errors become their exit codes (errors.h).
int run_given(const std::vector<Command>& commands) {
  try {
    check_omp_num_threads();  // bounded as --threads is (kMaxThreads), before any thread starts
    for (const Command& c : commands)
      if (*c.app) return c.run();
  } catch (const Error& e) {
    print_error(e.what());
    return e.code();
  } catch (const std::exception& e) {
    print_error(fmt::format("internal error (a bug: please report it): {}", e.what()));
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{kDescription, "trainrun"};
  app.set_version_flag("--version", "trainrun " + trainrun_version());
  app.require_subcommand(1);
  app.footer("Run `trainrun SUBCOMMAND --help` for each command's options.");
  const std::vector<Command> commands = {
      add_run(app),          add_validate(app),     add_plan(app),           add_report(app),
      add_data_prepare(app), add_data_inspect(app), add_data_tokenizer(app), add_sample(app),
      add_inspect(app),      add_export(app),       add_slurm(app),          add_k8s(app),
      add_sweep(app),        add_compare(app),      add_runs(app),           add_reproduce(app),
      add_help(app)};

  const std::vector<std::string> args = with_default_command(argc, argv);
  try {
    std::vector<const char*> cargv;
    for (const auto& s : args) cargv.push_back(s.c_str());
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  return run_given(commands);
}

}  // namespace trainrun
