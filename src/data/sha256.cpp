// Through OpenSSL's libcrypto (Debian's libssl-dev): a hash is not the heart of trainrun, and
// libcrypto's is well kept and vectorised (SHA-NI where the CPU has it).
#include "sha256.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace trainrun {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1 || n != 32)
    throw std::runtime_error("SHA-256 failed in libcrypto (EVP_Digest)");
  std::string hex;
  hex.reserve(64);
  for (unsigned int i = 0; i < n; ++i) fmt::format_to(std::back_inserter(hex), "{:02x}", digest[i]);
  return hex;
}

}  // namespace trainrun
