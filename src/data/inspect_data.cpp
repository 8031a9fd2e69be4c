// `trainrun data inspect`: one pass over each source's train split (a histogram of ids, the
// documents between end-of-text ids), the blend's counts over the run's samples, and the first
// samples decoded. It opens the data through open_sample_stream, so it sees what training sees.
#include "trainrun/data/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "json.h"
#include "open_shards.h"
#include "trainrun/data/data.h"
#include "trainrun/data/sample_stream.h"
#include "trainrun/data/tokenizer.h"

namespace trainrun {

namespace {

constexpr int kTopIds = 8;

struct SourceStats {
  int64_t tokens = 0;
  std::vector<int64_t> count;  // count[id]
  int64_t documents = 0;       // maximal runs of tokens other than the end-of-text id
};

SourceStats scan(const TokenDataset& d, int64_t eot) {
  SourceStats st;
  st.tokens = d.num_tokens();
  std::vector<int32_t> buf(size_t{1} << 20);
  bool after_eot = true;  // the stream's first token starts a document
  for (int64_t pos = 0; pos < st.tokens; pos += static_cast<int64_t>(buf.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), st.tokens - pos);
    d.read(pos, n, buf.data());
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<size_t>(buf[static_cast<size_t>(i)]);
      if (id >= st.count.size()) st.count.resize(id + 1);
      ++st.count[id];
      const bool is_eot = static_cast<int64_t>(id) == eot;
      if (!is_eot && after_eot) ++st.documents;
      after_eot = is_eot;
    }
  }
  return st;
}

// A source's figures: its histogram gives the ids used, the largest and the most frequent.
Json source_json(const SampleStream& stream, size_t s, double total_weight, const Tokenizer* tok,
                 int vocab_size, int64_t eot) {
  const auto& src = stream.source(s);
  const SourceStats st = scan(*src.data, eot);
  int64_t used = 0;
  std::vector<std::pair<int64_t, int32_t>> top;  // (count, id)
  for (size_t id = 0; id < st.count.size(); ++id) {
    if (st.count[id] == 0) continue;
    ++used;
    top.emplace_back(st.count[id], static_cast<int32_t>(id));
  }
  const size_t k = std::min<size_t>(kTopIds, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  top.resize(k);
  const int64_t largest = static_cast<int64_t>(st.count.size()) - 1;
  Json js = {{"name", src.name},
             {"weight", src.weight / total_weight},
             {"data", src.data->describe()},
             {"tokens", st.tokens},
             {"samples_per_epoch", stream.epoch_samples(s)},
             {"vocab_size", vocab_size > 0 ? vocab_size : largest + 1},
             {"ids_used", used},
             {"largest_id", largest},
             {"documents", eot >= 0 ? Json(st.documents) : Json(nullptr)},
             {"eot_count", eot >= 0 && eot <= largest ? st.count[static_cast<size_t>(eot)] : 0},
             {"top", Json::array()}};
  for (const auto& [n, id] : top)
    js["top"].push_back({{"id", id},
                         {"text", ids_text(tok, {id})},
                         {"share", static_cast<double>(n) / static_cast<double>(st.tokens)}});
  return js;
}

// The whole report as JSON; --json prints it, text() renders it for people.
Json report_json(const SampleStream& stream, const Tokenizer* tok, int vocab_size,
                 int64_t run_samples, const InspectRequest& req) {
  const int64_t eot = req.eot >= 0 ? req.eot : tok ? tok->end_of_text() : -1;
  Json j = {{"split", stream.describe()},
            {"seq_len", stream.seq_len()},
            {"order", fmt::format("{}", stream.order())},
            {"tokenizer", tok ? fmt::format("BPE, {} tokens", tok->vocab_size()) : "bytes"},
            {"eot", eot},
            {"sources", Json::array()},
            {"samples", Json::array()}};
  double total_weight = 0;
  for (size_t s = 0; s < stream.num_sources(); ++s) total_weight += stream.source(s).weight;
  for (size_t s = 0; s < stream.num_sources(); ++s)
    j["sources"].push_back(source_json(stream, s, total_weight, tok, vocab_size, eot));
  if (stream.num_sources() > 1 && run_samples > 0) {
    const std::vector<int64_t> counts = stream.counts(run_samples);
    Json jm = {{"samples", run_samples}, {"sources", Json::array()}};
    for (size_t s = 0; s < counts.size(); ++s)
      jm["sources"].push_back(
          {{"name", stream.source(s).name},
           {"samples", counts[s]},
           {"share", static_cast<double>(counts[s]) / static_cast<double>(run_samples)},
           {"epochs",
            static_cast<double>(counts[s]) / static_cast<double>(stream.epoch_samples(s))}});
    j["mixture"] = std::move(jm);
  }
  std::vector<int32_t> window(static_cast<size_t>(stream.seq_len()) + 1);
  for (int i = 0; i < req.samples; ++i) {
    const SampleStream::Place p = stream.place(i);
    stream.read(i, window.data());
    j["samples"].push_back({{"index", i},
                            {"source", stream.source(p.source).name},
                            {"start", p.start},
                            {"ids", window},
                            {"text", ids_text(tok, window)}});
  }
  return j;
}

std::string text(const Json& j) {
  const auto str = [](const Json& v) { return v.get<std::string>(); };
  std::string out = fmt::format("train split: {}; windows of {} tokens; tokenizer: {}\n",
                                str(j["split"]), j["seq_len"].get<int>() + 1, str(j["tokenizer"]));
  for (const Json& s : j["sources"]) {
    std::string tops;
    for (const Json& t : s["top"])
      tops += fmt::format("{}{:?} {:.1f}%", tops.empty() ? "" : ", ", str(t["text"]),
                          100 * t["share"].get<double>());
    out += fmt::format(
        "source {} (weight {:.1f}%): {}; {} samples an epoch\n"
        "  vocabulary: {} of {} ids used, largest {}; most frequent: {}\n",
        str(s["name"]), 100 * s["weight"].get<double>(), str(s["data"]),
        s["samples_per_epoch"].get<int64_t>(), s["ids_used"].get<int64_t>(),
        s["vocab_size"].get<int64_t>(), s["largest_id"].get<int64_t>(), tops);
    if (s["documents"].is_null())
      out +=
          "  documents: not marked (no end-of-text id: the tokenizer has no <|endoftext|>; "
          "pass --eot ID to count them)\n";
    else
      out += fmt::format(
          "  documents: {} (separated by end-of-text id {}, which appears {} times)\n",
          s["documents"].get<int64_t>(), j["eot"].get<int64_t>(), s["eot_count"].get<int64_t>());
  }
  if (const Json* m = member(j, "mixture")) {
    out += fmt::format("mixture over the run's {} samples (train.steps x train.batch_size):",
                       (*m)["samples"].get<int64_t>());
    const Json& srcs = (*m)["sources"];
    for (size_t s = 0; s < srcs.size(); ++s)
      out += fmt::format(" {} {} ({:.2f}%, {:.2f} epochs){}", str(srcs[s]["name"]),
                         srcs[s]["samples"].get<int64_t>(), 100 * srcs[s]["share"].get<double>(),
                         srcs[s]["epochs"].get<double>(), s + 1 < srcs.size() ? ";" : "\n");
  }
  for (const Json& x : j["samples"]) {
    const int64_t start = x["start"].get<int64_t>();
    out +=
        fmt::format("sample {} ({}, tokens {}..{}): {:?}\n", x["index"].get<int>(),
                    str(x["source"]), start, start + j["seq_len"].get<int64_t>(), str(x["text"]));
  }
  return out;
}

std::string report(const SampleStream& stream, const Tokenizer* tok, int vocab_size,
                   int64_t run_samples, const InspectRequest& req) {
  const Json j = report_json(stream, tok, vocab_size, run_samples, req);
  return req.json ? j.dump(2) + "\n" : text(j);
}

}  // namespace

std::string inspect_data(const Experiment& exp, const InspectRequest& req) {
  const auto stream =
      open_sample_stream(exp.data, Split::train, exp.model.vocab_size, exp.seed, exp.model.seq_len);
  const std::unique_ptr<Tokenizer> tok = data_tokenizer(exp.data);
  return report(*stream, tok.get(), exp.model.vocab_size,
                exp.train.steps * int64_t{exp.train.batch_size}, req);
}

std::string inspect_shards(const std::string& path, int seq_len, const InspectRequest& req) {
  DataConfig data;
  data.mix = {MixSource{path, 1.0, "", ""}};
  // One source named as a data.mix source would be, opened under the name the command line
  // gives it (`path`): its messages name what the user typed, not a config key. No model
  // bounds the ids here: any id a shard's width holds is accepted.
  std::vector<SampleStream::Source> sources;
  sources.push_back({mix_source_name(data.mix.front()), 1.0,
                     open_shards({path, "path", "", "", "", data.val_fraction, false, -1},
                                 Split::train, INT_MAX)});
  const auto stream = std::make_unique<SampleStream>(std::move(sources), data.order, 0, seq_len,
                                                     data.shuffle_block);
  const std::unique_ptr<Tokenizer> tok = data_tokenizer(data);
  return report(*stream, tok.get(), tok ? tok->vocab_size() : 0, 0, req);
}

}  // namespace trainrun
