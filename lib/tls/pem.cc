#include "lib/tls/pem.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio ReadOnly(absl::string_view pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's reason for the last failure on this thread, and clears the queue.
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "not PEM";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : absl::StrCat("OpenSSL error ", code);
}

}  // namespace

absl::Status CheckCertificates(absl::string_view pem) {
  Bio bio = ReadOnly(pem);
  int count = 0;
  for (;;) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    ++count;
  }
  // The loop ends at the end of the text (PEM_R_NO_START_LINE) or at a block
  // that does not parse.
  const unsigned long last = ERR_peek_last_error();
  if (count > 0 && ERR_GET_LIB(last) == ERR_LIB_PEM &&
      ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    return absl::OkStatus();
  }
  const std::string reason = OpenSslReason();
  return absl::InvalidArgumentError(
      count == 0 ? absl::StrCat("no PEM certificate (", reason, ")")
                 : absl::StrCat("certificate ", count + 1, " does not parse (",
                                reason, ")"));
}

absl::Status CheckKeyPair(absl::string_view cert_pem,
                          absl::string_view key_pem) {
  Bio cert_bio = ReadOnly(cert_pem);
  Cert cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no PEM certificate (", OpenSslReason(), ")"));
  }
  Bio key_bio = ReadOnly(key_pem);
  // No passphrase callback: an encrypted key fails here rather than prompting.
  Key key(PEM_read_bio_PrivateKey(
      key_bio.get(), nullptr, [](char*, int, int, void*) { return 0; },
      nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no unencrypted PEM private key (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the private key does not belong to the certificate");
  }
  return absl::OkStatus();
}

}  // namespace aggregator
