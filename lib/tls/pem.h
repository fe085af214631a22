// PEM checks made when the configuration is read, so a bad certificate or key
// is a configuration error naming its file, not a handshake that fails later
// (and, on reload, leaves the running certificates in force).
#ifndef LIB_TLS_PEM_H_
#define LIB_TLS_PEM_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aggregator {

// `pem` holds one or more X.509 certificates and nothing unparsable between
// them. INVALID_ARGUMENT saying what is wrong otherwise.
absl::Status CheckCertificates(absl::string_view pem);

// `key_pem` is a private key that belongs to the first certificate of
// `cert_pem` (a chain starts with its leaf).
absl::Status CheckKeyPair(absl::string_view cert_pem,
                          absl::string_view key_pem);

}  // namespace aggregator

#endif  // LIB_TLS_PEM_H_
