#include "k8s_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "trainrun/core/errors.h"

namespace trainrun::k8s {
namespace {

[[noreturn]] void refuse(const std::string& option, const std::string& value,
                         const std::string& why, const std::string& example) {
  throw ConfigError(
      fmt::format("k8s {} '{}': {}; e.g. {} {}", option, value, why, option, example));
}

// The regular expressions of distribution/reference (reference/regexp.go), for ECMAScript.
const std::string kAlnum = "[a-z0-9]+";
const std::string kPathComponent = kAlnum + "(?:(?:[._]|__|-+)" + kAlnum + ")*";
const std::string kDomainComponent = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const std::string kDomain =
    "(?:" + kDomainComponent + "(?:\\." + kDomainComponent + ")*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?";
const std::string kTag = "[\\w][\\w.-]{0,127}";
const std::string kDigest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";

// Far above any real reference; std::regex recurses per character, so longer input is refused
// before it is matched.
constexpr size_t kMaxReference = 1024;
constexpr size_t kMaxName = 255;  // the repository name, registry included

}  // namespace

void check_image(const std::string& option, const std::string& value, const std::string& example) {
  if (value.empty())
    refuse(option, value, "empty: name the container image holding trainrun", example);
  if (value.size() > kMaxReference)
    refuse(option, value, fmt::format("longer than {} characters", kMaxReference), example);
  static const std::regex kReference("((?:" + kDomain + "/)?" + kPathComponent + "(?:/" +
                                     kPathComponent + ")*)(?::(" + kTag + "))?(?:@(" + kDigest +
                                     "))?");
  std::smatch m;
  if (!std::regex_match(value, m, kReference)) {
    const std::string path = value.substr(0, value.find_first_of(":@"));
    const std::string repo = path.substr(path.find('/') == std::string::npos ? 0 : path.find('/'));
    const bool upper =
        std::any_of(repo.begin(), repo.end(), [](unsigned char c) { return std::isupper(c) != 0; });
    refuse(option, value,
           fmt::format("not a container image reference [REGISTRY[:PORT]/]PATH[:TAG][@DIGEST]{}",
                       upper ? ": the repository path must be lower case"
                             : " (PATH: lower-case letters and digits, separated by '/', '.', "
                               "'_', '__' or '-'; TAG: up to 128 letters, digits, '_', '.' and "
                               "'-', not first)"),
           example);
  }
  if (m.length(1) > static_cast<long>(kMaxName))
    refuse(option, value, fmt::format("the repository name is longer than {} characters", kMaxName),
           example);
  const std::string digest = m.str(3);
  if (digest.rfind("sha256:", 0) == 0 && digest.size() != 7 + 64)
    refuse(option, value, "a sha256 digest has 64 hexadecimal digits", example);
}

void check_dns_label(const std::string& option, const std::string& value,
                     const std::string& example) {
  static const std::regex kLabel("[a-z0-9](?:[-a-z0-9]*[a-z0-9])?");
  if (value.size() > 63 || !std::regex_match(value, kLabel))
    refuse(option, value,
           "not a Kubernetes name (DNS-1123 label): at most 63 lower-case letters, digits and "
           "'-', starting and ending with a letter or digit",
           example);
}

void check_dns_subdomain(const std::string& option, const std::string& value,
                         const std::string& example) {
  static const std::regex kSubdomain(
      "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*");
  if (value.size() > 253 || !std::regex_match(value, kSubdomain))
    refuse(option, value,
           "not a Kubernetes name (DNS-1123 subdomain): at most 253 lower-case letters, digits, "
           "'-' and '.', each dot-separated part starting and ending with a letter or digit",
           example);
}

void check_quantity(const std::string& option, const std::string& value, bool bytes,
                    const std::string& example) {
  // resource.Quantity's grammar (k8s.io/apimachinery), without the sign: a limit is positive.
  static const std::regex kQuantity(
      "\\+?([0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?");
  std::smatch m;
  if (value.size() > 64 || !std::regex_match(value, m, kQuantity))
    refuse(option, value,
           value.rfind('-', 0) == 0
               ? std::string("a limit cannot be negative")
               : std::string("not a Kubernetes quantity: a number with an optional suffix, Ki Mi "
                             "Gi Ti Pi Ei (powers of 1024), k M G T P E (powers of 1000), m "
                             "(thousandths) or an exponent such as e9; suffixes are "
                             "case-sensitive and have no B"),
           example);
  const std::string digits = m.str(1);
  if (digits.find_first_of("123456789") == std::string::npos)
    refuse(option, value, "must be above 0", example);
  if (bytes && m.str(2) == "m")
    refuse(option, value,
           fmt::format("m is thousandths, so that is {}/1000 of a byte: write {}M (megabytes) "
                       "or {}Mi (mebibytes)",
                       digits, digits, digits),
           example);
}

}  // namespace trainrun::k8s
