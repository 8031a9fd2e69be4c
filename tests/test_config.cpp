#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include "trainrun/config/config.h"
#include "trainrun/config/schema.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/experiment.h"

using namespace trainrun;

namespace {

// The smallest valid config: one data source, everything else default.
const char* kMinimal = R"(
data:
  synthetic: markov
)";

Experiment parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_experiment(yaml, "exp.yaml", overrides);
}

// The ConfigError message for a config that must be refused (fails the test if it is accepted).
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse(yaml, overrides);
  } catch (const ConfigError& e) {
    CHECK(e.code() == kExitUsage);
    CHECK(e.code() == 2);
    return e.what();
  }
  FAIL("config was accepted: " << yaml);
  return "";
}

bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string resumed_error(const Experiment& exp, const std::vector<std::string>& overrides) {
  Experiment copy = exp;
  try {
    apply_overrides(copy, overrides, true);
  } catch (const ConfigError& e) {
    CHECK(e.code() == 2);
    return e.what();
  }
  FAIL("overrides were accepted on resume");
  return "";
}

}  // namespace

TEST_CASE("defaults resolve from the struct initialisers; run_dir follows the name") {
  const Experiment e = parse(kMinimal);
  const Experiment d;
  CHECK(e.name == d.name);
  CHECK(e.seed == d.seed);
  CHECK(e.model.n_layer == d.model.n_layer);
  CHECK(e.model.hidden == d.model.hidden);
  CHECK(e.optimizer.betas == d.optimizer.betas);
  CHECK(e.train.steps == d.train.steps);
  CHECK(e.data.synthetic == "markov");
  CHECK(e.run_dir == "runs/run");
  CHECK(e.source_path == "exp.yaml");

  CHECK(parse("name: tiny-1.b\ndata: {synthetic: markov}").run_dir == "runs/tiny-1.b");
  CHECK(parse("run_dir: /scratch/x\ndata: {synthetic: markov}").run_dir == "/scratch/x");
  // A section whose keys are all commented out is an empty section.
  CHECK(parse("model:\n  # n_layer: 6\ndata: {synthetic: markov}").model.n_layer == 4);
}

TEST_CASE("values of every type are read into the experiment") {
  const Experiment e = parse(R"(
name: exp
seed: 18446744073709551615
device: auto
model:
  type: mlp
  hidden: [64, 32]
  activation: relu
  dropout: 0.25
data:
  train: shards/train_*.bin
  val: shards/val_*.bin
train:
  steps: 20
  precision: bf16
optimizer:
  lr: 3e-4
  betas: [0.8, 0.95]
checkpoint:
  async: yes
launcher:
  mpirun_args: ["--mca", "btl", "self,vader"]
slurm:
  extra:
    - "--gres=gpu:8"
)");
  CHECK(e.seed == 18446744073709551615ull);
  CHECK(e.device == DeviceChoice::automatic);
  CHECK(e.model.type == ModelType::mlp);
  CHECK(e.model.hidden == std::vector<int>{64, 32});
  CHECK(e.model.activation == ActivationKind::relu);
  CHECK(e.model.dropout == 0.25);
  CHECK(e.data.train == "shards/train_*.bin");
  CHECK(e.train.steps == 20);
  CHECK(e.train.precision == Precision::bf16);
  CHECK(e.optimizer.lr == 3e-4);
  CHECK(e.optimizer.betas == std::vector<double>{0.8, 0.95});
  CHECK(e.checkpoint.async);
  CHECK(e.launcher.mpirun_args == std::vector<std::string>{"--mca", "btl", "self,vader"});
  CHECK(e.slurm.extra == std::vector<std::string>{"--gres=gpu:8"});
}

TEST_CASE("unknown keys name the file, line:column and the closest key") {
  SUBCASE("typo in a leaf") {
    auto msg = error_of("data: {synthetic: markov}\nmodel:\n  n_layers: 6\n");
    CHECK(has(msg, "exp.yaml:3:3"));
    CHECK(has(msg, "unknown key 'model.n_layers'"));
    CHECK(has(msg, "did you mean 'model.n_layer'?"));
  }
  SUBCASE("typo in a section name") {
    auto msg = error_of("data: {synthetic: markov}\nmodle:\n  n_layer: 6\n");
    CHECK(has(msg, "exp.yaml:2:1"));
    CHECK(has(msg, "did you mean 'model'?"));
  }
  SUBCASE("right name in the wrong section") {
    auto msg = error_of("data: {synthetic: markov}\ntrain:\n  lr: 0.1\n");
    CHECK(has(msg, "unknown key 'train.lr'"));
    CHECK(has(msg, "did you mean 'optimizer.lr'?"));
  }
  SUBCASE("nothing close: list what the section holds") {
    auto msg = error_of("data: {synthetic: markov}\nmodel:\n  wibble: 6\n");
    CHECK(has(msg, "unknown key 'model.wibble'"));
    CHECK_FALSE(has(msg, "did you mean"));
    CHECK(has(msg, "n_layer"));
  }
  SUBCASE("a dotted key at the top level") {
    auto msg = error_of("data: {synthetic: markov}\nmodel.n_layer: 6\n");
    CHECK(has(msg, "exp.yaml:2:1"));
    CHECK(has(msg, "must be nested"));
  }
  SUBCASE("a repeated key") {
    auto msg = error_of("data: {synthetic: markov}\nmodel:\n  n_layer: 6\n  n_layer: 8\n");
    CHECK(has(msg, "exp.yaml:4:3"));
    CHECK(has(msg, "duplicate key 'model.n_layer'"));
  }
}

TEST_CASE("a wrong type says what was expected and what was found, with line:column") {
  auto msg = error_of("data: {synthetic: markov}\nmodel:\n  n_layer: four\n");
  CHECK(has(msg, "exp.yaml:3:12"));
  CHECK(has(msg, "model.n_layer"));
  CHECK(has(msg, "expected an integer"));
  CHECK(has(msg, "found string 'four'"));

  msg = error_of("data: {synthetic: markov}\nmodel:\n  n_layer: 2.5\n");
  CHECK(has(msg, "found number 2.5"));
  msg = error_of("data: {synthetic: markov}\noptimizer:\n  lr: [1]\n");
  CHECK(has(msg, "expected a number (must be > 0), found a list"));
  msg = error_of("data: {synthetic: markov}\ncheckpoint:\n  async: maybe\n");
  CHECK(has(msg, "expected a boolean"));
  msg = error_of("data: {synthetic: markov}\nseed: -1\n");
  CHECK(has(msg, "expected a non-negative integer"));
  // An element of a list is pointed at itself.
  msg = error_of("data: {synthetic: markov}\nmodel:\n  hidden: [64, x]\n");
  CHECK(has(msg, "exp.yaml:3:16"));
  CHECK(has(msg, "model.hidden[1]"));
  msg = error_of("data: {synthetic: markov}\nmodel:\n  hidden: 64\n");
  CHECK(has(msg, "expected a list of integers"));
  CHECK(has(msg, "[64]"));
  // Quoted numbers are strings.
  msg = error_of("data: {synthetic: markov}\ntrain:\n  steps: \"20\"\n");
  CHECK(has(msg, "found string \"20\""));
}

TEST_CASE("top level and sections must be mappings") {
  auto msg = error_of("- a\n- b\n");
  CHECK(has(msg, "exp.yaml:1:1"));
  CHECK(has(msg, "top level must be a mapping"));
  msg = error_of("data: {synthetic: markov}\nmodel: 5\n");
  CHECK(has(msg, "exp.yaml:2:8"));
  CHECK(has(msg, "model must be a mapping"));
}

TEST_CASE("out-of-range values say what is allowed") {
  // Each line after the data source, and what the error must say about it.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"model:\n  n_layer: 0\n",
       {"exp.yaml:3:12", "model.n_layer=0 is out of range: must be in [1, 4096]"}},
      {"model:\n  dropout: 1.0\n", {"must be in [0, 1)"}},
      {"model:\n  type: gtp\n", {"must be one of gpt, mlp", "did you mean 'gpt'?"}},
      {"model:\n  vocab_size: 1\n", {"must be in [2, 2147483647]"}},
      {"model:\n  vocab_size: 2147483648\n", {"model.vocab_size=2147483648 is out of range"}},
      {"optimizer:\n  betas: [0.9, 0.95, 0.99]\n",
       {"optimizer.betas has 3 values: expected exactly 2"}},
      {"optimizer:\n  betas: [0.9, 1.0]\n",
       {"optimizer.betas[1]=1.0 is out of range: must be in [0, 1)"}},
      {"model: {type: mlp, hidden: [64, 0]}\n",
       {"model.hidden[1]=0 is out of range: must be >= 1"}},
      {"device: tpu\n", {"must be one of cpu, cuda, auto"}},
      {"distributed: {zero: 4}\n", {"must be in [0, 3]"}},
      {"name: ../evil\n", {"not a safe file name"}},
      {"optimizer: {warmup_steps: -1}\n",
       {"optimizer.warmup_steps=-1 is out of range: must be >= 0"}},
      {"train: {steps: 0}", {"exp.yaml:2:"}},
      {"checkpoint: {keep_last: 0}", {"exp.yaml:2:"}},
      {"logging: {every: 0}", {"exp.yaml:2:"}},
      {"train: {eval_every: -1}", {"exp.yaml:2:"}},
      {"distributed: {nproc: 0}", {"exp.yaml:2:"}},
      {"distributed: {nodes: 0}", {"exp.yaml:2:"}},
      {"model: {seq_len: 0}", {"exp.yaml:2:"}},
      {"model: {activation: tanh}", {"exp.yaml:2:"}},
      {"train: {precision: fp16}", {"exp.yaml:2:"}},
  };
  for (const auto& entry : cases) {
    // Named copies, not structured bindings: clang 14 cannot capture those in the macro's lambda.
    const auto& yaml = entry.first;
    const auto& says = entry.second;
    CAPTURE(yaml);
    const std::string msg = error_of("data: {synthetic: markov}\n" + yaml);
    for (const std::string& s : says) CHECK_MESSAGE(has(msg, s), s);
  }
  CHECK(has(error_of("data: {synthetic: parquet}\n"), "data.synthetic='parquet' is not allowed"));
}

namespace {

// An enum key: its allowed values are its enum's names, in order, each parsing to its value and
// printing back as itself.
template <class E, class Get>
void check_enum_key(const std::string& key, Get get, std::vector<std::string> extra = {}) {
  CAPTURE(key);
  const auto names = enum_names<E>();
  std::string joined;
  for (auto n : names) joined += (joined.empty() ? "" : ", ") + std::string(n);
  int listed = 0;
  for (const auto& k : config_keys()) {
    if (k.key != key) continue;
    ++listed;
    CHECK(k.type == "enum");
    CHECK(k.allowed == joined);
  }
  CHECK(listed == 1);
  for (size_t i = 0; i < names.size(); ++i) {
    const auto value = static_cast<E>(i);
    std::vector<std::string> set = extra;
    set.push_back(key + "=" + std::string(names[i]));
    const Experiment e = parse(kMinimal, set);
    CHECK(get(e) == value);
    CHECK(config_value(e, key) == names[i]);
    CHECK(enum_name(value) == names[i]);
    CHECK(enum_from_name<E>(names[i]) == value);
    CHECK(fmt::format("{}", value) == names[i]);
    CHECK(has(to_yaml(e), ": " + std::string(names[i]) + "\n"));
  }
  CHECK_FALSE(enum_from_name<E>(std::string(names[0]) + "x").has_value());
  CHECK_FALSE(enum_from_name<E>("").has_value());
}

}  // namespace

TEST_CASE("the llama keys are read into the experiment, with their defaults") {
  const Experiment d = parse(kMinimal);
  CHECK(d.model.n_kv_head == 0);
  CHECK(d.model.rope_theta == 10000.0);
  CHECK(d.model.ffn_hidden == 0);
  CHECK(d.model.tie_embeddings);
  const Experiment e = parse(R"(
data: {synthetic: markov}
model: {type: llama, n_head: 4, n_kv_head: 2, rope_theta: 500000, ffn_hidden: 96,
        tie_embeddings: false}
)");
  CHECK(e.model.type == ModelType::llama);
  CHECK(e.model.n_kv_head == 2);
  CHECK(e.model.rope_theta == 500000.0);
  CHECK(e.model.ffn_hidden == 96);
  CHECK_FALSE(e.model.tie_embeddings);
  CHECK(llama_ffn_hidden(e.model) == 96);
  CHECK(llama_kv_heads(e.model) == 2);
  // Auto width: ceil(8 d_model / 3) up to a multiple of 64; kv heads default to the heads.
  CHECK(llama_ffn_hidden(d.model) == 384);  // 8 * 128 / 3 = 341.3 -> 342 -> 384
  ModelConfig m;
  m.d_model = 96;
  CHECK(llama_ffn_hidden(m) == 256);  // exactly 256
  m.d_model = 100;
  CHECK(llama_ffn_hidden(m) == 320);  // 266.7 -> 267 -> 320
  CHECK(llama_kv_heads(d.model) == d.model.n_head);
  auto msg = error_of(kMinimal, {"model.type=llama", "model.rope_theta=0"});
  CHECK(has(msg, "model.rope_theta"));
  msg = error_of(kMinimal, {"model.type=llama", "model.n_kv_head=-1"});
  CHECK(has(msg, "model.n_kv_head"));
}

TEST_CASE("enum keys: the enums' names are the schema's allowed values") {
  check_enum_key<DeviceChoice>("device", [](const Experiment& e) { return e.device; });
  check_enum_key<ModelType>("model.type", [](const Experiment& e) { return e.model.type; });
  check_enum_key<ActivationKind>("model.activation",
                                 [](const Experiment& e) { return e.model.activation; });
  check_enum_key<Precision>("train.precision",
                            [](const Experiment& e) { return e.train.precision; }, {"device=cuda"});
  check_enum_key<LrSchedule>("optimizer.schedule",
                             [](const Experiment& e) { return e.optimizer.schedule; });
  // The defaults are the enums' own defaults.
  const Experiment d = parse(kMinimal);
  CHECK(d.device == DeviceChoice::cpu);
  CHECK(d.model.type == ModelType::gpt);
  CHECK(d.model.activation == ActivationKind::gelu);
  CHECK(d.train.precision == Precision::fp32);
  CHECK(d.optimizer.schedule == LrSchedule::cosine);
}

TEST_CASE("enum keys: a word outside the enum is refused as a string key would be") {
  auto msg = error_of("data: {synthetic: markov}\ndevice: gpu\n");
  CHECK(has(msg, "exp.yaml:2:9: device='gpu' is not allowed: must be one of cpu, cuda, auto"));
  msg = error_of(kMinimal, {"optimizer.schedule=cosin"});
  CHECK(has(msg,
            "--set optimizer.schedule=cosin: optimizer.schedule='cosin' is not allowed: must be "
            "one of cosine, linear, constant (did you mean 'cosine'?)"));
  msg = error_of(kMinimal, {"model.type="});
  CHECK(has(msg, "model.type='' is not allowed: must be one of gpt, mlp, llama"));
  msg = error_of(kMinimal, {"model.activation=[relu]"});
  CHECK(has(msg, "model.activation: expected a string, found a list of 1"));
  msg = error_of(kMinimal, {"train.precision=BF16"});
  CHECK(has(msg, "train.precision='BF16' is not allowed"));  // exact spelling only
}

TEST_CASE("YAML syntax errors and missing files") {
  auto msg = error_of("data: {synthetic: markov}\nmodel:\n  hidden: [64, 64\n  n_layer: 2\n");
  CHECK(has(msg, "exp.yaml:"));
  CHECK(has(msg, "YAML syntax error"));
  CHECK(has(msg, "exp.yaml:4:10: YAML syntax error"));  // where the unclosed list was noticed
  msg = error_of("data: {synthetic: markov}\n---\nmodel: {n_layer: 2}\n");
  CHECK(has(msg, "holds 2 YAML documents"));

  try {
    load_experiment("/nonexistent/dir/exp.yaml", {});
    FAIL("a missing file was accepted");
  } catch (const ConfigError& e) {
    CHECK(e.code() == 2);
    CHECK(has(e.what(), "/nonexistent/dir/exp.yaml"));
    CHECK(has(e.what(), "not found"));
  }
}

TEST_CASE("load_experiment reads a file and records where it came from") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("trainrun_test_config_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "name: fromfile\ndata:\n  text: input.txt\nmodel:\n  n_layr: 2\n";
  }
  try {
    load_experiment(path.string(), {});
    FAIL("unknown key accepted");
  } catch (const ConfigError& e) {
    CHECK(has(e.what(), path.string() + ":5:3: unknown key 'model.n_layr'"));
  }
  {
    std::ofstream out(path);
    out << "name: fromfile\ndata:\n  text: input.txt\n";
  }
  const Experiment e = load_experiment(path.string(), {"model.n_layer=2"});
  CHECK(e.source_path == path.string());
  CHECK(e.data.text == "input.txt");
  CHECK(e.model.n_layer == 2);
  std::filesystem::remove(path);
}

TEST_CASE("cross-field rules") {
  SUBCASE("d_model divisible by n_head") {
    auto msg = error_of("data: {synthetic: markov}\nmodel:\n  d_model: 130\n  n_head: 4\n");
    CHECK(has(msg, "exp.yaml:3:12"));
    CHECK(has(msg, "model.d_model=130 is not divisible by model.n_head=4"));
    // Irrelevant for an mlp.
    CHECK(parse("data: {synthetic: markov}\nmodel: {type: mlp, d_model: 130, n_head: 4}")
              .model.d_model == 130);
  }
  SUBCASE("mlp needs hidden layers") {
    auto msg = error_of("data: {synthetic: markov}\nmodel: {type: mlp, hidden: []}\n");
    CHECK(has(msg, "model.hidden is empty"));
    CHECK(parse("data: {synthetic: markov}\nmodel: {hidden: []}").model.hidden.empty());
  }
  SUBCASE("llama: the key/value heads divide the heads; the head dimension is even") {
    const std::string llama = "data: {synthetic: markov}\nmodel:\n  type: llama\n";
    auto msg = error_of(llama + "  n_head: 4\n  n_kv_head: 3\n");
    CHECK(has(msg, "exp.yaml:5:14"));
    CHECK(has(msg, "model.n_kv_head=3 does not divide model.n_head=4"));
    msg = error_of(llama + "  d_model: 12\n  n_head: 4\n");
    CHECK(has(msg, "head dimension d_model / n_head = 3 is odd"));
    msg = error_of(llama + "  d_model: 130\n  n_head: 4\n");
    CHECK(has(msg, "model.d_model=130 is not divisible by model.n_head=4"));
    CHECK_FALSE(has(msg, "is odd"));  // one complaint about one mistake
    const Experiment e = parse(llama + "  n_head: 4\n  n_kv_head: 1\n  d_model: 8\n");
    CHECK(e.model.n_kv_head == 1);
  }
  SUBCASE("the llama keys are refused for the other families, naming them") {
    auto msg = error_of(kMinimal, {"model.n_kv_head=2", "model.rope_theta=500000"});
    CHECK(has(msg,
              "model.n_kv_head, model.rope_theta apply only for model.type llama (model.type "
              "is gpt): remove them or set model.type: llama"));
    msg = error_of(kMinimal, {"model.tie_embeddings=false"});
    CHECK(has(msg, "model.tie_embeddings applies only for model.type llama"));
    CHECK(has(msg, "a gpt's head is always tied to its token embedding"));
    msg = error_of(kMinimal, {"model.type=mlp", "model.ffn_hidden=64"});
    CHECK(has(msg, "model.ffn_hidden applies only for model.type llama (model.type is mlp)"));
    // Their defaults, spelled out, are fine anywhere.
    CHECK(parse(kMinimal, {"model.n_kv_head=0", "model.tie_embeddings=true"}).model.n_kv_head == 0);
  }
  SUBCASE("batch divisible by micro-batch x ranks, with the arithmetic") {
    auto msg = error_of(R"(
data: {synthetic: markov}
train: {batch_size: 12, micro_batch_size: 4}
distributed: {nproc: 2}
)");
    CHECK(has(msg, "train.batch_size=12 is not divisible by micro_batch_size(4) x ranks(2) = 8"));
    CHECK(has(msg, "exp.yaml:3:"));
    CHECK(parse("data: {synthetic: markov}\ntrain: {batch_size: 16, micro_batch_size: 4}\n"
                "distributed: {nproc: 2}")
              .train.micro_batch_size == 4);
  }
  SUBCASE("batch divisible by ranks across nodes") {
    auto msg = error_of("data: {synthetic: markov}\ndistributed: {nproc: 2, nodes: 3}\n");
    CHECK(has(msg, "train.batch_size=8 is not divisible by ranks(6)"));
  }
  SUBCASE("exactly one data source") {
    auto msg = error_of("name: x\n");
    CHECK(has(msg, "set one of data.train, data.mix, data.text or data.synthetic"));
    msg = error_of("data: {train: a.bin, synthetic: markov}\n");
    CHECK(has(msg, "data.train and data.synthetic are both set"));
    CHECK(has(msg, "set one of data.train, data.mix, data.text or data.synthetic"));
  }
  SUBCASE("data.val needs data.train") {
    auto msg = error_of("data: {text: a.txt, val: v.bin}\n");
    CHECK(has(msg, "data.val is set without data.train"));
    CHECK(parse("data: {train: t.bin, val: v.bin}").data.val == "v.bin");
  }
  SUBCASE("min_lr <= lr; warmup may exceed steps") {
    auto msg = error_of("data: {synthetic: markov}\noptimizer: {lr: 0.001, min_lr: 0.01}\n");
    CHECK(has(msg, "optimizer.min_lr=0.01 is above optimizer.lr=0.001"));
    CHECK(parse("data: {synthetic: markov}\ntrain: {steps: 10}\noptimizer: {warmup_steps: 50}")
              .optimizer.warmup_steps == 50);
  }
  SUBCASE("bf16 on any device: the CPU computes the bf16 reference") {
    CHECK(
        parse("device: cpu\ndata: {synthetic: markov}\ntrain: {precision: bf16}").train.precision ==
        Precision::bf16);
    CHECK(parse("device: cuda\ndata: {synthetic: markov}\ntrain: {precision: bf16}")
              .train.precision == Precision::bf16);
  }
  SUBCASE("held-out data to evaluate on") {
    auto msg = error_of("data: {synthetic: markov, val_fraction: 0}\n");
    CHECK(has(msg, "data.val_fraction=0 leaves nothing to evaluate"));
    CHECK(parse("data: {synthetic: markov, val_fraction: 0}\ntrain: {eval_every: 0}")
              .data.val_fraction == 0);
  }
  SUBCASE("synthetic stream long enough for one sequence") {
    auto msg = error_of("data: {synthetic: markov, synthetic_tokens: 50}\n");
    CHECK(has(msg, "data.synthetic_tokens=50"));
  }
  SUBCASE("every broken rule is reported at once") {
    auto msg = error_of("data: {synthetic: markov}\nmodel: {n_head: 3}\noptimizer: {min_lr: 1}\n");
    CHECK(has(msg, "model.n_head=3"));
    CHECK(has(msg, "optimizer.min_lr=1.0"));
  }
}

TEST_CASE("validate_for_world checks divisibility against a concrete world size") {
  const Experiment e = parse("data: {synthetic: markov}\ntrain: {batch_size: 12}");
  validate_for_world(e, 4);
  try {
    validate_for_world(e, 8);
    FAIL("12 sequences over 8 ranks accepted");
  } catch (const ConfigError& err) {
    CHECK(err.code() == 2);
    CHECK(has(err.what(), "train.batch_size=12 is not divisible by ranks(8)"));
  }
  CHECK_THROWS_AS(validate_for_world(Experiment{}, 1), ConfigError);  // no data source
}

TEST_CASE("--set overrides are typed by the schema and applied after the file, in order") {
  const Experiment e =
      parse(kMinimal, {"optimizer.betas=[0.9,0.95]", "train.steps=20", "data.text=../x.txt",
                       "data.synthetic=", "model.type=mlp", "model.hidden=[64,64]",
                       "launcher.mpirun_args=[--mca, btl, tcp]", "checkpoint.async=true", "name=a",
                       "name=b", "seed=7", "optimizer.lr=3e-4"});
  CHECK(e.optimizer.betas == std::vector<double>{0.9, 0.95});
  CHECK(e.train.steps == 20);
  CHECK(e.data.text == "../x.txt");
  CHECK(e.data.synthetic.empty());
  CHECK(e.model.hidden == std::vector<int>{64, 64});
  CHECK(e.launcher.mpirun_args == std::vector<std::string>{"--mca", "btl", "tcp"});
  CHECK(e.checkpoint.async);
  CHECK(e.name == "b");
  CHECK(e.run_dir == "runs/b");  // resolved after the overrides
  CHECK(e.seed == 7);
  CHECK(e.optimizer.lr == 3e-4);
  // The file's value is replaced.
  CHECK(parse("data: {synthetic: markov}\ntrain: {steps: 5}", {"train.steps=6"}).train.steps == 6);
}

TEST_CASE("bad --set keys and values name the override") {
  auto msg = error_of(kMinimal, {"train.stepz=3"});
  CHECK(has(msg, "--set train.stepz=3: unknown key 'train.stepz'"));
  CHECK(has(msg, "did you mean 'train.steps'?"));
  msg = error_of(kMinimal, {"train.steps=abc"});
  CHECK(has(msg, "--set train.steps=abc"));
  CHECK(has(msg, "expected an integer, found string 'abc'"));
  msg = error_of(kMinimal, {"optimizer.betas=0.9"});
  CHECK(has(msg, "expected a list of numbers"));
  msg = error_of(kMinimal, {"model.n_layer=0"});
  CHECK(has(msg, "--set model.n_layer=0: model.n_layer=0 is out of range"));
  msg = error_of(kMinimal, {"train.steps"});
  CHECK(has(msg, "expected KEY=VALUE"));
  msg = error_of(kMinimal, {"model=3"});
  CHECK(has(msg, "'model' is a section"));
  msg = error_of(kMinimal, {"model.hidden=[64, 64"});
  CHECK(has(msg, "not valid YAML"));
  // A cross-field rule broken by an override points at the override.
  msg = error_of(kMinimal, {"model.n_head=3"});
  CHECK(has(msg, "--set model.n_head=3: model.d_model=128 is not divisible by model.n_head=3"));
}

TEST_CASE("to_yaml round-trips every key") {
  const Experiment e = parse(R"(
name: round.trip
seed: 18446744073709551615
device: auto
model: {type: mlp, hidden: [3, 5, 7], activation: relu, dropout: 0.1, vocab_size: 50257}
data: {train: "shards/*.bin", val: "true"}
train: {steps: 123456789012, precision: bf16, micro_batch_size: 2}
optimizer: {lr: 0.0006, min_lr: 1e-9, betas: [0.9, 0.95], eps: 1e-8, schedule: linear}
checkpoint: {every: 50, async: true}
logging: {straggler_margin: 0.35}
distributed: {zero: 1, hostfile: "", oversubscribe: true}
launcher: {mpirun_args: ["--mca", "a: b", "#x", "-x", "FOO=a b", "~", "null", "12", ""]}
fault_tolerance: {step_timeout: 12.5}
slurm: {extra: ["--gres=gpu:8", "--time=01:00:00"]}
)");
  const std::string yaml = to_yaml(e);
  CAPTURE(yaml);
  CHECK_FALSE(has(yaml, "source_path"));
  CHECK(has(yaml, "model:\n  type: mlp"));
  const Experiment back = parse(yaml);
  CHECK(to_yaml(back) == yaml);
  // Every key lands in the same place (not just the emitter agreeing with itself).
  for (const auto& k : config_keys()) {
    CAPTURE(k.key);
    CHECK(config_value(back, k.key) == config_value(e, k.key));
  }
  CHECK(back.seed == e.seed);
  CHECK(back.data.val == "true");
  CHECK(back.launcher.mpirun_args == e.launcher.mpirun_args);
  CHECK(back.optimizer.min_lr == e.optimizer.min_lr);
  CHECK(back.train.steps == 123456789012);
  CHECK(back.run_dir == "runs/round.trip");

  // Schema order, grouped by section.
  CHECK(yaml.find("name:") < yaml.find("model:"));
  CHECK(yaml.find("model:") < yaml.find("data:"));
  CHECK(yaml.find("  n_layer:") < yaml.find("  n_head:"));
}

TEST_CASE("resume refuses changes to what the checkpoint is, allows the rest") {
  const Experiment e = parse(kMinimal);
  auto msg = resumed_error(e, {"model.n_layer=6"});
  CHECK(has(msg,
            "cannot change model.n_layer on resume (checkpoint has 4, --set asks 6): "
            "start a new run instead"));
  CHECK(has(resumed_error(e, {"data.synthetic=", "data.text=x.txt"}), "data.synthetic"));
  CHECK(has(resumed_error(e, {"seed=1"}), "cannot change seed on resume"));

  Experiment r = e;
  apply_overrides(r,
                  {"train.steps=5000", "optimizer.lr=3e-4", "distributed.nproc=2",
                   "model.n_layer=4", "logging.every=1"},
                  true);
  CHECK(r.train.steps == 5000);
  CHECK(r.optimizer.lr == 3e-4);
  CHECK(r.distributed.nproc == 2);
  CHECK(r.logging.every == 1);
  // A --set list repeated by the supervisor's restart: only a key's last --set counts.
  Experiment twice = e;
  CHECK_NOTHROW(apply_overrides(twice, {"model.n_layer=6", "model.n_layer=4"}, true));
  CHECK(has(resumed_error(e, {"model.n_layer=4", "model.n_layer=6"}),
            "--set model.n_layer=6: cannot change model.n_layer on resume (checkpoint has 4"));

  // Not on resume: anything goes, rules still hold, and a failure leaves exp untouched.
  Experiment n = e;
  apply_overrides(n, {"model.n_layer=6"}, false);
  CHECK(n.model.n_layer == 6);
  CHECK_THROWS_AS(apply_overrides(n, {"model.n_head=5"}, false), ConfigError);
  CHECK(n.model.n_head == 4);
}

TEST_CASE("the schema lists every key once with a description") {
  const auto keys = config_keys();
  CHECK(keys.size() >= 45);
  for (size_t i = 0; i < keys.size(); ++i) {
    CAPTURE(keys[i].key);
    CHECK_FALSE(keys[i].description.empty());
    CHECK_FALSE(keys[i].type.empty());
    for (size_t j = i + 1; j < keys.size(); ++j) CHECK(keys[i].key != keys[j].key);
  }
  CHECK_THROWS_WITH_AS(config_value(Experiment{}, "optimizer.betaz"),
                       doctest::Contains("did you mean 'optimizer.betas'?"), ConfigError);
}

TEST_CASE("docs/config.md is the current schema_markdown()") {
  const char* root = std::getenv("TRAINRUN_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TRAINRUN_SOURCE_ROOT is not set (tests/meson.build sets it)");
  const auto path = std::filesystem::path(root) / "docs" / "config.md";
  const std::string md = schema_markdown();
  CHECK(has(md, "| `model.n_layer` | `int` | `4` | [1, 4096] | no |"));
  if (std::getenv("TRAINRUN_UPDATE_DOCS")) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << md;
  }
  std::ifstream in(path);
  std::stringstream committed;
  committed << in.rdbuf();
  CHECK_MESSAGE(committed.str() == md,
                "docs/config.md is stale: regenerate it with "
                "TRAINRUN_UPDATE_DOCS=1 build/tests/test_config");
}

TEST_CASE("a config that expands past its size or depth bound is refused, not walked") {
  // One 64 KiB string repeated through aliases: 300 references x 64 KiB = 19 MiB expanded from a
  // file of about 66 KiB. Each level of "billion laughs" multiplies it; the bound stops it early.
  std::string yaml = "data:\n  synthetic: markov\nx_anchor: &s \"" + std::string(65536, 'a') +
                     "\"\nlauncher:\n  mpirun_args: [";
  for (int i = 0; i < 300; ++i) yaml += i ? ", *s" : "*s";
  yaml += "]\n";
  CHECK(yaml.size() < 70000);
  std::string msg = error_of(yaml);
  CHECK(msg.find("expands to more than 16 MiB") != std::string::npos);

  // Nested aliases: 10 levels of 10 references each would be 10^10 nodes.
  std::string laughs = "data:\n  synthetic: markov\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    laughs += fmt::format("l{}: &l{} [", i, i);
    for (int j = 0; j < 10; ++j) laughs += fmt::format("{}*l{}", j ? ", " : "", i - 1);
    laughs += "]\n";
  }
  msg = error_of(laughs);
  CHECK(msg.find("exp.yaml: expands to more than") != std::string::npos);

  std::string deep =
      "data:\n  synthetic: markov\nlauncher:\n  mpirun_args: " + std::string(40, '[') +
      std::string(40, ']') + "\n";
  msg = error_of(deep);
  CHECK(msg.find("nested more than 32 levels deep") != std::string::npos);

  // The same bound guards --set values.
  msg = error_of(kMinimal, {"launcher.mpirun_args=" + std::string(40, '[') + std::string(40, ']')});
  CHECK(msg.find("--set launcher.mpirun_args=") != std::string::npos);
  CHECK(msg.find("nested more than") != std::string::npos);

  // Past yaml-cpp's own limit (a few hundred levels) the parser stops first, with "bad file":
  // the same message, with the line.
  msg = error_of("data:\n  synthetic: markov\nmodel: " + std::string(3000, '[') +
                 std::string(3000, ']') + "\n");
  CHECK(has(msg, "exp.yaml:3:"));
  CHECK(has(msg, "nested more than 32 levels deep"));
  CHECK_FALSE(has(msg, "bad file"));
  msg = error_of(kMinimal, {"model.hidden=" + std::string(3000, '[') + std::string(3000, ']')});
  CHECK(has(msg, "--set model.hidden="));
  CHECK(has(msg, "nested more than 32 levels deep"));
}

TEST_CASE("a non-finite number is named as one, with the key's range") {
  for (const char* v : {".nan", ".NaN", ".inf", "-.Inf", "+.inf", "nan", "-inf"}) {
    CAPTURE(v);
    std::string msg =
        error_of(fmt::format("data: {{synthetic: markov}}\noptimizer:\n  lr: {}\n", v));
    CHECK(has(msg, fmt::format("exp.yaml:3:7: optimizer.lr: expected a number (must be > 0), "
                               "found {} (not a finite number)",
                               v)));
    msg = error_of(kMinimal, {fmt::format("optimizer.betas=[0.9, {}]", v)});
    CHECK(has(msg, fmt::format("optimizer.betas[1]: expected a number (must be in [0, 1)), "
                               "found {} (not a finite number)",
                               v)));
    msg = error_of(kMinimal, {fmt::format("model.n_layer={}", v)});
    CHECK(has(msg, fmt::format("expected an integer, found {} (not a finite number)", v)));
    msg = error_of(kMinimal,
                   {"data.synthetic=", fmt::format("data.mix=[{{path: a, weight: {}}}]", v)});
    CHECK(has(msg, fmt::format("data.mix[0].weight: expected a number (must be > 0), found {} "
                               "(not a finite number)",
                               v)));
  }
  // Quoted, it is a string, and said to be one.
  CHECK(has(error_of(kMinimal, {"optimizer.lr='.nan'"}), "found string \".nan\""));
}

TEST_CASE("a data.mix source whose key is not a name is a config error, not an internal one") {
  const std::string msg = error_of("data:\n  mix: [{[a]: 1}]\n");
  CHECK(has(msg, "exp.yaml:2:9: data.mix[0]: expected a key (path, weight, name or val)"));
}

TEST_CASE(
    "validate refuses what open_dataset would: markov order above 2, bytes over a small vocab") {
  std::string msg = error_of(kMinimal, {"data.markov_order=3"});
  CHECK(msg.find("data.markov_order") != std::string::npos);
  msg = error_of("data:\n  text: some.txt\nmodel:\n  vocab_size: 100\n");
  CHECK(msg.find("exp.yaml:4:15: data.text is byte-tokenized (256 symbols) but "
                 "model.vocab_size is 100") != std::string::npos);
  CHECK_NOTHROW(parse("data:\n  text: some.txt\nmodel:\n  vocab_size: 256\n"));
}

TEST_CASE("sizes that would overflow int64 arithmetic are refused up front (exit 2)") {
  std::string msg =
      error_of(kMinimal, {"model.vocab_size=2147483647", "model.d_model=65536", "model.n_head=1"});
  CHECK(msg.find("the token embedding (vocab_size x d_model) would hold 1.41e+14 elements") !=
        std::string::npos);
  msg = error_of(kMinimal, {"model.seq_len=1000000000", "data.synthetic_tokens=2000000002"});
  CHECK(msg.find("attention scores") != std::string::npos);
  msg = error_of(kMinimal, {"model.type=mlp", "model.hidden=[100000000, 100000000]"});
  CHECK(msg.find("MLP hidden layer weight") != std::string::npos);
  CHECK_NOTHROW(parse(kMinimal, {"model.vocab_size=50304", "model.d_model=768", "model.n_head=12",
                                 "model.seq_len=1024"}));
}

TEST_CASE("a rollback may not zero the learning rate") {
  const std::string msg = error_of(kMinimal, {"fault_tolerance.rollback_lr_factor=0"});
  CHECK(msg.find("fault_tolerance.rollback_lr_factor") != std::string::npos);
  CHECK_NOTHROW(parse(kMinimal, {"fault_tolerance.rollback_lr_factor=0.5"}));
}

TEST_CASE("data.mix: a list of {path, weight, name, val}, round-tripped, its mistakes refused") {
  const Experiment e = parse(R"(
data:
  mix:
    - {path: data/web, weight: 0.7}
    - path: "data/code/*.bin"
      weight: 0.3
      name: code
      val: data/code-val.bin
  order: epochs
  shuffle_block: 4
)");
  REQUIRE(e.data.mix.size() == 2);
  CHECK(e.data.mix[0].path == "data/web");
  CHECK(e.data.mix[0].weight == 0.7);
  CHECK(e.data.mix[1].name == "code");
  CHECK(e.data.mix[1].val == "data/code-val.bin");
  CHECK(e.data.order == DataOrder::epochs);
  CHECK(e.data.shuffle_block == 4);
  const Experiment back = parse(to_yaml(e));
  CHECK(back.data.mix == e.data.mix);
  CHECK(config_value(e, "data.mix") ==
        "[{path: data/web, weight: 0.7}, {path: data/code/*.bin, weight: 0.3, name: code, "
        "val: data/code-val.bin}]");
  // --set takes the same YAML.
  CHECK(
      parse(kMinimal, {"data.synthetic=", "data.mix=[{path: a, weight: 2}]"}).data.mix[0].weight ==
      2.0);

  CHECK(has(error_of("data: {mix: [{weight: 1}]}\n"), "data.mix[0]: no path"));
  CHECK(has(error_of("data: {mix: [{path: a, wieght: 1}]}\n"),
            "unknown key 'wieght' (did you mean 'weight'?)"));
  CHECK(has(error_of("data: {mix: [{path: a, weight: 0}]}\n"),
            "data.mix[0].weight=0.0 is out of range: must be > 0"));
  CHECK(has(error_of("data: {mix: [{path: a, weight: x}]}\n"),
            "data.mix[0].weight: expected a number"));
  CHECK(has(error_of("data: {mix: [a, b]}\n"), "expected a mapping such as {path: data/web"));
  CHECK(has(error_of("data: {mix: [{path: a, name: w}, {path: b, name: w}]}\n"),
            "data.mix[0] and [1] are both named 'w'"));
  CHECK(has(error_of("data: {train: t.bin, mix: [{path: a}]}\n"),
            "data.train and data.mix are both set"));
  CHECK(has(error_of("data: {mix: [{path: a}], val: v.bin}\n"),
            "a data.mix source has its own `val`"));
  CHECK(has(error_of("data: {synthetic: markov, shuffle_block: 0}\n"), "data.shuffle_block=0"));
  CHECK(has(error_of("data: {synthetic: markov, order: random}\n"),
            "must be one of auto, windows, epochs"));
}

TEST_CASE("model.init_from fills the model keys a config leaves out, and only those") {
  // A stand-in for hf_model_source: the model a folder named "hf" describes.
  int asked = 0;
  const ModelSource source = [&](const std::string& dir) -> std::optional<ModelConfig> {
    ++asked;
    if (dir != "hf") return std::nullopt;
    ModelConfig m;
    m.type = ModelType::llama;
    m.vocab_size = 320;
    m.d_model = 96;
    m.n_layer = 3;
    m.n_head = 6;
    m.n_kv_head = 2;
    m.ffn_hidden = 160;
    m.rope_theta = 5e5;
    m.tie_embeddings = false;
    m.seq_len = 4096;
    return m;
  };
  const std::string yaml = std::string(kMinimal) + "model:\n  init_from: hf\n  n_layer: 2\n";
  const Experiment e = parse_experiment(yaml, "exp.yaml", {"model.d_model=192"}, source);
  CHECK(asked == 1);
  CHECK(e.model.type == ModelType::llama);
  CHECK(e.model.vocab_size == 320);
  CHECK(e.model.n_head == 6);
  CHECK(e.model.n_kv_head == 2);
  CHECK(e.model.ffn_hidden == 160);
  CHECK(e.model.rope_theta == 5e5);
  CHECK_FALSE(e.model.tie_embeddings);
  CHECK(e.model.n_layer == 2);    // the file's
  CHECK(e.model.d_model == 192);  // the --set's
  CHECK(e.model.seq_len == 64);   // never filled: the run's own context
  // The resolved config states every key, so reading it again fills nothing.
  const Experiment again = parse_experiment(to_yaml(e), "again.yaml", {}, source);
  CHECK(to_yaml(again) == to_yaml(e));

  // Without a source, or for a folder it does not describe, the defaults stay.
  CHECK(parse_experiment(yaml, "exp.yaml", {}).model.type == ModelType::gpt);
  const std::string other = std::string(kMinimal) + "model:\n  init_from: elsewhere\n";
  CHECK(parse_experiment(other, "exp.yaml", {}, source).model.vocab_size == 256);

  // A rule a filled key breaks points at the folder's config.json.
  try {
    parse_experiment(yaml, "exp.yaml",
                     {"distributed.tp=4", "distributed.nproc=4", "distributed.oversubscribe=true"},
                     source);
    FAIL("tp 4 with the folder's 6 heads was accepted");
  } catch (const ConfigError& e2) {
    CHECK(has(e2.what(), "hf/config.json"));
    CHECK(has(e2.what(), "model.n_head=6 is not divisible by distributed.tp=4"));
  }
}
