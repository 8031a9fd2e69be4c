#include "non_finite.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "trainrun/checkpoint.h"

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

std::string non_finite_reason(const CheckpointData& d) {
  const std::pair<const char*, const std::vector<float>*> buffers[] = {
      {"model", &d.weights}, {"optimizer/m", &d.adam_m}, {"optimizer/v", &d.adam_v}};
  for (const auto& [group, flat] : buffers) {
    std::optional<NonFinite> nf = find_non_finite(flat->data(), flat->size());
    if (!nf) continue;
    // Name the tensor holding the first one, counting within it.
    for (const ParamEntry& p : d.params) {
      size_t numel = 1;
      for (int64_t dim : p.shape) numel *= size_t(dim);
      if (nf->first < size_t(p.offset) || nf->first >= size_t(p.offset) + numel) continue;
      NonFinite in_tensor = *find_non_finite(flat->data() + p.offset, numel);
      return non_finite_message(fmt::format("{}/{}", group, p.name), in_tensor, numel) +
             (in_tensor.count < nf->count ? fmt::format(", {} in all of {}", nf->count, group)
                                          : std::string());
    }
    return non_finite_message(fmt::format("{} (alignment padding)", group), *nf, flat->size());
  }
  return "";
}

std::string non_finite_reason(const CheckpointShard& s) {
  const std::pair<const char*, const std::vector<float>*> buffers[] = {
      {"model", &s.weights}, {"optimizer/m", &s.adam_m}, {"optimizer/v", &s.adam_v}};
  for (const auto& [group, part] : buffers) {
    std::optional<NonFinite> nf = find_non_finite(part->data(), part->size());
    if (!nf) continue;
    const int64_t at = s.range.begin + static_cast<int64_t>(nf->first);
    for (const ParamEntry& p : s.params) {
      int64_t numel = 1;
      for (int64_t dim : p.shape) numel *= dim;
      if (at >= p.offset && at < p.offset + numel)
        return fmt::format(
            "rank {}'s shard: {}/{} holds a non-finite value (element {} is {}), "
            "{} in the shard's {} of {}",
            s.rank, group, p.name, at - p.offset, nf->value, nf->count, part->size(), group);
    }
    return non_finite_message(fmt::format("rank {}'s shard of {}", s.rank, group), *nf,
                              part->size());
  }
  return "";
}

}  // namespace trainrun
