// Byte-level BPE tokenizers, read and written as Hugging Face's tokenizer.json (the format of
// PyPI's `tokenizers`; docs/data-format.md says which files load), trained on text, and the
// token shards `trainrun data prepare --tokenizer` makes with one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

struct BpeModel;  // src/data/bpe_model.h

// An immutable tokenizer: copies share one model, and every method may be called from many
// threads at once.
class Tokenizer {
 public:
  explicit Tokenizer(std::shared_ptr<const BpeModel> model);

  // Reads tokenizer.json. Throws DataError naming the file and, for a tokenizer trainrun cannot
  // reproduce exactly (a normalizer, another pre-tokenizer or model), what it does not support.
  static Tokenizer load(const std::string& path);
  static Tokenizer parse(std::string_view json, const std::string& what);
  // The tokenizer.json text; save writes it beside the target and renames.
  std::string to_json() const;
  void save(const std::string& path) const;

  // Appends the ids of text (any bytes: invalid UTF-8 is encoded byte by byte, so
  // decode(encode(x)) == x whenever every byte is in the vocabulary).
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of ids; throws DataError for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const;   // largest id + 1, added tokens included
  int end_of_text() const;  // the id of <|endoftext|> (GPT-2's document separator), or -1
  int num_merges() const;
  const BpeModel& model() const { return *m_; }

 private:
  std::shared_ptr<const BpeModel> m_;
};

// `bytes` as well-formed UTF-8 for a terminal: every byte that does not belong to a well-formed
// code point, and every control character but newline and tab, becomes U+FFFD. A sample that stops
// inside a multi-byte character, or a byte-level token that is half of one, then prints as text.
std::string printable_utf8(std::string_view bytes);

// Token ids as printable text: decoded by `tok`, or without one (byte-level data) each id below
// 256 as that byte and the others as "<id>"; then printable_utf8. What `sample` prints and what
// `data inspect` shows.
std::string ids_text(const Tokenizer* tok, const std::vector<int32_t>& ids);

// `data tokenizer encode`: the ids of a file's bytes. `decode`: the bytes of the
// whitespace-separated ids in a file (standard input when ids_path is empty).
std::vector<int32_t> encode_file(const Tokenizer& tok, const std::string& path);
std::string decode_ids_text(const Tokenizer& tok, const std::string& ids_path);

// Learns merges on the text files until the vocabulary holds vocab_size tokens (256 bytes
// first), or no pair repeats. threads <= 0: all cores.
Tokenizer train_tokenizer(const std::vector<std::string>& files, int vocab_size, int threads);
Tokenizer train_tokenizer_on_text(std::string_view text, int vocab_size);

// PrepareRequest::eot: the id written between input files (documents).
inline constexpr int64_t kEotAuto = -2;  // bytes: 0; a tokenizer: its <|endoftext|>, if any
inline constexpr int64_t kEotNone = -1;  // nothing between documents

struct PrepareRequest {
  std::vector<std::string> texts;  // files and directories (their files, sorted), in order:
                                   // each file is one document
  int64_t eot = kEotAuto;          // the id between documents (kEotAuto, kEotNone or an id)
  std::string tokenizer;           // tokenizer.json
  std::string out_dir;             // gets train.bin, val.bin, manifest.json, tokenizer.json
  double val_fraction = 0.1;       // the split: the piece boundary after this share of bytes
  int threads = 0;                 // <= 0: all cores
  size_t block_bytes = 64 << 20;   // read at a time (memory is a few times this)
  bool progress = true;            // a progress line on stderr when it is a terminal
  bool force = false;              // replace outputs that exist (trainrun/data/output_files.h);
                                   // an interrupted prepare's journal: start over
  // Tests only. The CLI's TRAINRUN_PREPARE_STOP_AFTER=N: once this many inputs are done and
  // journaled, stop at the next boundary as if killed there (SIGKILL when stop_kills, else
  // src/data/prepare_journal.h's PrepareStopped), leaving the journal and partial shards.
  int64_t stop_after_inputs = -1;
  bool stop_kills = false;
  // The journal's entries come at most this often (0: at every input and block boundary), and
  // after_entry runs after each (it may throw, as if the prepare were killed there).
  double journal_seconds = 1.0;
  std::function<void()> after_entry;
};

// `trainrun data prepare`: prepare_token_shards with a tokenizer, else prepare_byte_shards.
// Both are resumable: an interrupted prepare (killed, out of space) leaves DIR/.prepare.json
// and DIR/{train,val}.bin.partial, and the same request continues it (docs/data-format.md).
std::string prepare_shards(const PrepareRequest& req);

// `trainrun data prepare` without a tokenizer: the files' bytes as tokens (vocabulary 256),
// streamed into train.bin and val.bin (the last val_fraction of the tokens). Returns a one-line
// summary.
std::string prepare_byte_shards(const PrepareRequest& req);

// `trainrun data prepare --tokenizer`: tokenizes the texts in parallel, streaming, into token
// shards and a manifest (docs/data-format.md). Returns a one-line summary.
std::string prepare_token_shards(const PrepareRequest& req);

// The run's tokenizer: data.tokenizer when set (checked against the manifest beside
// data.train's shards, if any), else the one that manifest names (checked against the hash it
// records), or nullptr when there is none (byte-level shards, text, synthetic data).
std::unique_ptr<Tokenizer> data_tokenizer(const DataConfig& data);

}  // namespace trainrun
