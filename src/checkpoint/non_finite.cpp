#include "non_finite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

std::optional<NonFinite> find_non_finite(const float* data, size_t n) {
  // Exponent bits all ones = inf or NaN. Counting with integers (not std::isfinite on floats)
  // lets the compiler vectorise the loop without -ffast-math, which would fold isfinite away.
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    count += (bits & 0x7f800000u) == 0x7f800000u;
  }
  if (count == 0) return std::nullopt;
  NonFinite nf;
  nf.count = count;
  while (std::isfinite(data[nf.first])) ++nf.first;
  nf.value = data[nf.first];
  return nf;
}

std::string non_finite_message(const std::string& where, const NonFinite& nf, size_t n) {
  return fmt::format("{} holds {} non-finite value{} of {} (the first, element {}, is {})", where,
                     nf.count, nf.count == 1 ? "" : "s", n, nf.first, nf.value);
}

namespace {

// The first non-finite value in weights, m, v (each holding flat elements [begin, begin + size)),
// named by its tensor and counted within the part of that tensor the buffer holds.
std::string first_non_finite(const std::vector<ParamEntry>& params, int64_t begin,
                             const StateBuffer& weights, const StateBuffer& m,
                             const StateBuffer& v) {
  const std::pair<const char*, const StateBuffer*> buffers[] = {
      {"model", &weights}, {"optimizer/m", &m}, {"optimizer/v", &v}};
  for (const auto& [group, part] : buffers) {
    std::optional<NonFinite> nf = find_non_finite(part->data(), part->size());
    if (!nf) continue;
    const int64_t at = begin + static_cast<int64_t>(nf->first), end = begin + int64_t(part->size());
    for (const ParamEntry& p : params) {
      int64_t numel = 1;
      for (int64_t dim : p.shape) numel *= dim;
      if (at < p.offset || at >= p.offset + numel) continue;
      // The tensor's part inside this buffer (all of it, unless a shard cuts it).
      const int64_t lo = std::max(p.offset, begin), hi = std::min(p.offset + numel, end);
      NonFinite in_tensor = *find_non_finite(part->data() + (lo - begin), size_t(hi - lo));
      in_tensor.first += size_t(lo - p.offset);
      return non_finite_message(fmt::format("{}/{}", group, p.name), in_tensor, size_t(numel)) +
             (in_tensor.count < nf->count ? fmt::format(", {} in all of {}", nf->count, group)
                                          : std::string());
    }
    return non_finite_message(fmt::format("{} (alignment padding)", group), *nf, part->size());
  }
  return "";
}

}  // namespace

std::string non_finite_reason(const CheckpointData& d) {
  return first_non_finite(d.params, 0, d.weights, d.adam_m, d.adam_v);
}

}  // namespace trainrun
