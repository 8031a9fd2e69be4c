// `trainrun data inspect`: one pass over each source's train split (a histogram of ids, the
// documents between end-of-text ids), the blend's counts over the run's samples, and the first
// samples decoded. It opens the data through open_sample_stream, so it sees what training sees.
#include "trainrun/data/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "json.h"
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

// One id as text: the tokenizer's bytes, else the byte itself (byte-level data), else <id>.
std::string token_text(const Tokenizer* tok, const std::vector<int32_t>& ids) {
  if (tok) return printable_utf8(tok->decode(ids));
  std::string out;
  for (const int32_t id : ids) {
    if (id < 256)
      out += static_cast<char>(id);
    else
      out += fmt::format("<{}>", id);
  }
  return printable_utf8(out);
}

std::string report(const SampleStream& stream, const Tokenizer* tok, int vocab_size,
                   int64_t run_samples, const InspectRequest& req) {
  const int64_t eot = req.eot >= 0 ? req.eot : tok ? tok->end_of_text() : -1;
  Json j;
  std::string text;
  j["seq_len"] = stream.seq_len();
  j["order"] = fmt::format("{}", stream.order());
  j["tokenizer"] = tok ? fmt::format("BPE, {} tokens", tok->vocab_size()) : "bytes";
  j["eot"] = eot;
  text += fmt::format("train split: {}; windows of {} tokens; tokenizer: {}\n", stream.describe(),
                      stream.seq_len() + 1, j["tokenizer"].get<std::string>());
  double total_weight = 0;
  for (size_t s = 0; s < stream.num_sources(); ++s) total_weight += stream.source(s).weight;
  j["sources"] = Json::array();
  for (size_t s = 0; s < stream.num_sources(); ++s) {
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
    const int64_t vocab = vocab_size > 0 ? vocab_size : largest + 1;
    Json js = {{"name", src.name},
               {"weight", src.weight / total_weight},
               {"data", src.data->describe()},
               {"tokens", st.tokens},
               {"samples_per_epoch", stream.epoch_samples(s)},
               {"vocab_size", vocab},
               {"ids_used", used},
               {"largest_id", largest},
               {"documents", eot >= 0 ? Json(st.documents) : Json(nullptr)}};
    js["top"] = Json::array();
    std::string tops;
    for (const auto& [n, id] : top) {
      const std::string t = token_text(tok, {id});
      const double share = static_cast<double>(n) / static_cast<double>(st.tokens);
      js["top"].push_back({{"id", id}, {"text", t}, {"share", share}});
      tops += fmt::format("{}{:?} {:.1f}%", tops.empty() ? "" : ", ", t, 100 * share);
    }
    text += fmt::format(
        "source {} (weight {:.1f}%): {}; {} samples an epoch\n"
        "  vocabulary: {} of {} ids used, largest {}; most frequent: {}\n",
        src.name, 100 * src.weight / total_weight, src.data->describe(), stream.epoch_samples(s),
        used, vocab, largest, tops);
    if (eot >= 0)
      text += fmt::format(
          "  documents: {} (separated by end-of-text id {}, which appears {} times)\n",
          st.documents, eot,
          eot < static_cast<int64_t>(st.count.size()) ? st.count[static_cast<size_t>(eot)] : 0);
    else
      text +=
          "  documents: not marked (no end-of-text id: the tokenizer has no <|endoftext|>; "
          "pass --eot ID to count them)\n";
    j["sources"].push_back(std::move(js));
  }
  if (stream.num_sources() > 1 && run_samples > 0) {
    const std::vector<int64_t> counts = stream.counts(run_samples);
    Json jm = {{"samples", run_samples}, {"sources", Json::array()}};
    text += fmt::format("mixture over the run's {} samples (train.steps x train.batch_size):",
                        run_samples);
    for (size_t s = 0; s < counts.size(); ++s) {
      const double share = static_cast<double>(counts[s]) / static_cast<double>(run_samples);
      const double epochs =
          static_cast<double>(counts[s]) / static_cast<double>(stream.epoch_samples(s));
      jm["sources"].push_back({{"name", stream.source(s).name},
                               {"samples", counts[s]},
                               {"share", share},
                               {"epochs", epochs}});
      text += fmt::format(" {} {} ({:.2f}%, {:.2f} epochs){}", stream.source(s).name, counts[s],
                          100 * share, epochs, s + 1 < counts.size() ? ";" : "\n");
    }
    j["mixture"] = std::move(jm);
  }
  j["samples"] = Json::array();
  std::vector<int32_t> window(static_cast<size_t>(stream.seq_len()) + 1);
  for (int i = 0; i < req.samples; ++i) {
    const SampleStream::Place p = stream.place(i);
    stream.read(i, window.data());
    const std::string t = token_text(tok, window);
    j["samples"].push_back({{"index", i},
                            {"source", stream.source(p.source).name},
                            {"start", p.start},
                            {"ids", window},
                            {"text", t}});
    text += fmt::format("sample {} ({}, tokens {}..{}): {:?}\n", i, stream.source(p.source).name,
                        p.start, p.start + stream.seq_len(), t);
  }
  return req.json ? j.dump(2) + "\n" : text;
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
  // No model bounds the ids here: any id a shard's width holds is accepted.
  const auto stream = open_sample_stream(data, Split::train, INT_MAX, 0, seq_len);
  const std::unique_ptr<Tokenizer> tok = data_tokenizer(data);
  return report(*stream, tok.get(), tok ? tok->vocab_size() : 0, 0, req);
}

}  // namespace trainrun
