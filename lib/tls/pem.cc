#include "lib/tls/pem.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

// The certificates of `pem` that parse, in order (stops at the first that
// does not).
std::vector<Cert> ReadAll(absl::string_view pem) {
  Bio bio = ReadOnly(pem);
  std::vector<Cert> certs;
  for (;;) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    certs.push_back(std::move(cert));
  }
  ERR_clear_error();
  return certs;
}

// "certificate 2 (CN=localhost)".
std::string Describe(const Cert& cert, size_t index) {
  Bio bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert.get()), 0,
                     XN_FLAG_RFC2253);
  char* text = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &text);
  return absl::StrCat("certificate ", index + 1, " (",
                      std::string(text, static_cast<size_t>(size)), ")");
}

// "2026-12-05 00:26:58 UTC".
std::string Format(const ASN1_TIME* time) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(time, &tm) != 1) return "an unreadable date";
  return absl::StrFormat("%04d-%02d-%02d %02d:%02d:%02d UTC", tm.tm_year + 1900,
                         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec);
}

// Why `cert` is not valid at `now`, or "" when it is.
std::string Invalidity(const Cert& cert, size_t index,
                       std::chrono::system_clock::time_point now) {
  time_t at = std::chrono::system_clock::to_time_t(now);
  const ASN1_TIME* not_before = X509_get0_notBefore(cert.get());
  const ASN1_TIME* not_after = X509_get0_notAfter(cert.get());
  // X509_cmp_time: -1 before `at`, 1 after, 0 on an unreadable time.
  if (X509_cmp_time(not_after, &at) <= 0) {
    return absl::StrCat(Describe(cert, index), " expired at ",
                        Format(not_after));
  }
  if (X509_cmp_time(not_before, &at) >= 0) {
    return absl::StrCat(Describe(cert, index), " is not valid before ",
                        Format(not_before));
  }
  return "";
}

}  // namespace

absl::Status CheckChain(absl::string_view pem,
                        std::chrono::system_clock::time_point now) {
  const std::vector<Cert> certs = ReadAll(pem);
  if (certs.size() > static_cast<size_t>(kMaxChainCertificates)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a chain of ", certs.size(), " certificates, over the limit of ",
        kMaxChainCertificates, " (each handshake sends it whole)"));
  }
  for (size_t i = 0; i < certs.size(); ++i) {
    const std::string why = Invalidity(certs[i], i, now);
    if (!why.empty()) return absl::InvalidArgumentError(why);
  }
  return absl::OkStatus();
}

std::optional<std::string> ExpiresSoon(
    absl::string_view pem, std::chrono::system_clock::duration within,
    std::chrono::system_clock::time_point now) {
  const std::vector<Cert> certs = ReadAll(pem);
  time_t soon = std::chrono::system_clock::to_time_t(now + within);
  for (size_t i = 0; i < certs.size(); ++i) {
    const ASN1_TIME* not_after = X509_get0_notAfter(certs[i].get());
    if (X509_cmp_time(not_after, &soon) < 0) {
      int days = 0;
      int seconds = 0;
      std::unique_ptr<ASN1_TIME, decltype(&ASN1_TIME_free)> from(
          ASN1_TIME_set(nullptr, std::chrono::system_clock::to_time_t(now)),
          &ASN1_TIME_free);
      if (from == nullptr ||
          ASN1_TIME_diff(&days, &seconds, from.get(), not_after) != 1) {
        days = seconds = 0;
      }
      return absl::StrFormat("%s expires at %s, in %.1f days",
                             Describe(certs[i], i), Format(not_after),
                             days + seconds / 86400.0);
    }
  }
  return std::nullopt;
}

absl::Status CheckCertificates(absl::string_view pem,
                               std::chrono::system_clock::time_point now) {
  if (pem.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(pem.size(), " bytes, over the limit of ", kMaxPemBytes,
                     " for a file of certificates"));
  }
  Bio bio = ReadOnly(pem);
  int count = 0;
  for (;;) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    if (++count > kMaxCertificates) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kMaxCertificates, " certificates"));
    }
  }
  // The loop ends at the end of the text (PEM_R_NO_START_LINE) or at a block
  // that does not parse.
  const unsigned long last = ERR_peek_last_error();
  if (count > 0 && ERR_GET_LIB(last) == ERR_LIB_PEM &&
      ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    // At least one is valid now; else name the first.
    const std::vector<Cert> certs = ReadAll(pem);
    std::string first_why;
    for (size_t i = 0; i < certs.size(); ++i) {
      const std::string why = Invalidity(certs[i], i, now);
      if (why.empty()) return absl::OkStatus();
      if (first_why.empty()) first_why = why;
    }
    return absl::InvalidArgumentError(
        certs.size() == 1
            ? first_why
            : absl::StrCat("no certificate is valid now: ", first_why));
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
