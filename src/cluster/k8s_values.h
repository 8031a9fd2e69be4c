// Kubernetes' grammars for the values `trainrun k8s` writes into a manifest: checked here, so a
// typo is refused with exit 2 and an example, not by the cluster after `kubectl apply` (or taken
// to mean something else: a memory limit of 500m is half a byte).
#pragma once

#include <string>

namespace trainrun::k8s {

// Each throws ConfigError naming `option` and `value`, what is wrong, and an example that works.

// A container image reference: [REGISTRY[:PORT]/]PATH[:TAG][@ALGORITHM:HEX], as
// distribution/reference parses it (path components lower case).
void check_image(const std::string& option, const std::string& value, const std::string& example);

// An object name: a DNS-1123 label (namespaces; 63 characters) or subdomain (claims and most
// objects; 253 characters, dot-separated labels).
void check_dns_label(const std::string& option, const std::string& value,
                     const std::string& example);
void check_dns_subdomain(const std::string& option, const std::string& value,
                         const std::string& example);

// A resource quantity above 0 (500m, 2, 1.5, 64Gi, 1.5G, 1e9). With `bytes` (memory, storage) the
// milli suffix is refused: "500m" is half a byte, almost surely meant as 500M or 500Mi.
void check_quantity(const std::string& option, const std::string& value, bool bytes,
                    const std::string& example);

}  // namespace trainrun::k8s
