// Standard base64 (RFC 4648), shared by the kubeconfig reader (k8s/), the registry client's
// basic auth (registry/) and the containers/storage reader (builder/store_image).
//
// Thread-safety: pure function.
#pragma once

#include <string>

namespace kiln {

/// Decodes standard base64 (whitespace ignored). False on invalid input; *out unchanged then.
bool DecodeBase64(const std::string& in, std::string* out);

/// Standard base64 with padding.
std::string EncodeBase64(const std::string& s);

}  // namespace kiln
