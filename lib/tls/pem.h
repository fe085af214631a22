// PEM checks made when the configuration is read, so a bad certificate or key
// is a configuration error naming its file, not a handshake that fails later
// (and, on reload, leaves the running certificates in force).
#ifndef LIB_TLS_PEM_H_
#define LIB_TLS_PEM_H_

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aggregator {

// Bounds of the certificate files the configuration names: Debian's whole
// CA bundle is 220 KB and 144 certificates; a chain a listener serves (or a
// client presents) is sent whole in every handshake.
inline constexpr size_t kMaxPemBytes = 1 << 20;
inline constexpr int kMaxCertificates = 1000;
inline constexpr int kMaxChainCertificates = 16;

// `pem` holds one or more X.509 certificates (at most kMaxCertificates in at
// most kMaxPemBytes) and nothing unparsable between them, and at least one of
// them is valid at `now` (a CA bundle may carry an old root beside good ones;
// a file of only expired or not yet valid certificates trusts or proves
// nothing). INVALID_ARGUMENT saying what is wrong otherwise.
absl::Status CheckCertificates(absl::string_view pem,
                               std::chrono::system_clock::time_point now =
                                   std::chrono::system_clock::now());

// `pem` (checked by CheckCertificates) as a chain served or presented: at
// most kMaxChainCertificates, and every one valid at `now` (the peer checks
// each). INVALID_ARGUMENT naming the first that is not, its subject and the
// date, e.g. "certificate 1 (CN=localhost) expired at 2026-12-05 00:26:58
// UTC".
absl::Status CheckChain(absl::string_view pem,
                        std::chrono::system_clock::time_point now =
                            std::chrono::system_clock::now());

// When a certificate of `pem` expires before `now + within`: which and when,
// e.g. "certificate 1 (CN=localhost) expires at 2026-12-08 00:26:58 UTC, in
// 1.9 days"; nullopt otherwise.
std::optional<std::string> ExpiresSoon(
    absl::string_view pem, std::chrono::system_clock::duration within,
    std::chrono::system_clock::time_point now =
        std::chrono::system_clock::now());

// `key_pem` is a private key that belongs to the first certificate of
// `cert_pem` (a chain starts with its leaf).
absl::Status CheckKeyPair(absl::string_view cert_pem,
                          absl::string_view key_pem);

}  // namespace aggregator

#endif  // LIB_TLS_PEM_H_
