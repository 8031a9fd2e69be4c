// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord files use, and
// TFRecord's "masked" form of it. Debian 12 packages no CRC-32C library (libcrc32c-dev came
// later). TensorBoard records and checkpoint shards use it. Pure functions: thread safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace trainrun {

// CRC-32C of `data`, continuing from `crc` (the CRC of what came before; 0 to start).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8: a CRC over data that itself holds
// CRCs is weak, so the stored value is rotated and offset.
uint32_t masked_crc32c(std::string_view data);

}  // namespace trainrun
