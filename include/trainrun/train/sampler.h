// `trainrun sample`: text generated from a checkpoint's weights (src/train/sampler.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

// Generates `tokens` tokens after `prompt` from the newest good checkpoint of run_dir, decoded with
// `tokenizer` (a tokenizer.json; "" = the run's own: data.tokenizer, else its shards' manifest,
// else bytes, where an id past 255 prints as <id>).
std::string sample_text(const std::string& run_dir_or_file, const std::string& prompt, int tokens,
                        double temperature, uint64_t seed, const std::string& tokenizer = "");

// The same generation's token ids, undecoded (`sample --ids`: for scripts, and to compare with
// another implementation token by token).
std::vector<int32_t> sample_ids(const std::string& run_dir_or_file, const std::string& prompt,
                                int tokens, double temperature, uint64_t seed,
                                const std::string& tokenizer = "");

}  // namespace trainrun
