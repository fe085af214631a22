// The PEM checks made when the configuration is read, on certificates made by
// openssl at test time (tests/testing/tls_certificates.h): what passes, and
// each refusal with the message that names what is wrong.
#include "lib/tls/pem.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/tls_certificates.h"

namespace aggregator {
namespace {

using testing::Certs;

std::string Read(const std::string& file) { return Certs().Read(file); }

// Makes the certificates (once, taking seconds) before a case reads the time:
// a `now` default argument may be evaluated before a Read() beside it.
void MakeCertificates() { (void)Certs(); }

// A small (EC) certificate, so that over kMaxCertificates of them stay under
// kMaxPemBytes, and server.key encrypted with a passphrase; made once.
const testing::Certificates& Extras() {
  static const bool made = [] {
    testing::Shell(
        "cd " + Certs().dir +
        " && openssl req -x509 -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=small "
        "-keyout small.key -out small.crt >/dev/null"
        " && openssl pkey -in server.key -aes256 -passout pass:secret "
        "-out encrypted.key");
    return true;
  }();
  (void)made;
  return Certs();
}

std::string Repeat(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

// 00:00:00 UTC of a day.
std::chrono::system_clock::time_point Utc(int year, int month, int day) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// A status as text, so a failed check shows the message ("OK" when ok).
std::string Text(const absl::Status& status) { return status.ToString(); }

constexpr char kBrokenBlock[] =
    "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n";

TEST_CASE("Certificates valid now pass; a bundle needs one valid") {
  MakeCertificates();
  CHECK(Text(CheckCertificates(Read("server.crt"))) == "OK");
  CHECK(Text(CheckCertificates(Read("ca.crt") + Read("other-ca.crt"))) == "OK");
  // An old root beside a good one.
  CHECK(Text(CheckCertificates(Read("expired.crt") + Read("ca.crt"))) == "OK");
}

TEST_CASE(
    "A file of only expired or not yet valid certificates is refused, naming "
    "the first and its date") {
  MakeCertificates();
  const absl::Status expired = CheckCertificates(Read("expired.crt"));
  CHECK(expired.code() == absl::StatusCode::kInvalidArgument);
  CHECK(expired.message() ==
        "certificate 1 (CN=localhost) expired at 2021-01-01 00:00:00 UTC");
  CHECK(CheckCertificates(Read("future.crt")).message() ==
        "certificate 1 (CN=localhost) is not valid before 2099-12-01 00:00:00 "
        "UTC");
  CHECK(CheckCertificates(Read("expired.crt") + Read("future.crt")).message() ==
        "no certificate is valid now: certificate 1 (CN=localhost) expired at "
        "2021-01-01 00:00:00 UTC");
  // `now` is the time checked at: in 2020 the expired one was good.
  CHECK(Text(CheckCertificates(Read("expired.crt"), Utc(2020, 6, 1))) == "OK");
}

TEST_CASE("Text that is not PEM certificates is refused, saying where") {
  MakeCertificates();
  const absl::Status empty = CheckCertificates("");
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(empty.message(), "no PEM certificate ("));
  CHECK(absl::StartsWith(CheckCertificates("hello").message(),
                         "no PEM certificate ("));
  // A key is not a certificate.
  CHECK(absl::StartsWith(CheckCertificates(Read("server.key")).message(),
                         "no PEM certificate ("));
  // A good certificate, then one that does not parse.
  const absl::Status broken =
      CheckCertificates(Read("server.crt") + kBrokenBlock);
  CHECK(broken.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(broken.message(), "certificate 2 does not parse ("));
}

TEST_CASE("The bounds: kMaxPemBytes and kMaxCertificates") {
  MakeCertificates();
  const std::string big(kMaxPemBytes + 1, '\n');
  CHECK(CheckCertificates(big).message() ==
        absl::StrCat(kMaxPemBytes + 1, " bytes, over the limit of ",
                     kMaxPemBytes, " for a file of certificates"));
  const std::string small = Extras().Read("small.crt");
  REQUIRE(small.size() * (kMaxCertificates + 1) <= kMaxPemBytes);
  CHECK(Text(CheckCertificates(Repeat(small, kMaxCertificates))) == "OK");
  CHECK(CheckCertificates(Repeat(small, kMaxCertificates + 1)).message() ==
        absl::StrCat("more than ", kMaxCertificates, " certificates"));
}

TEST_CASE(
    "A chain needs every certificate valid, names the first that is not, and "
    "holds at most kMaxChainCertificates") {
  MakeCertificates();
  CHECK(Text(CheckChain(Read("server.crt") + Read("ca.crt"))) == "OK");
  const absl::Status expired = CheckChain(Read("expired.crt") + Read("ca.crt"));
  CHECK(expired.code() == absl::StatusCode::kInvalidArgument);
  CHECK(expired.message() ==
        "certificate 1 (CN=localhost) expired at 2021-01-01 00:00:00 UTC");
  CHECK(CheckChain(Read("server.crt") + Read("future.crt")).message() ==
        "certificate 2 (CN=localhost) is not valid before 2099-12-01 00:00:00 "
        "UTC");
  const std::string server = Read("server.crt");
  CHECK(Text(CheckChain(Repeat(server, kMaxChainCertificates))) == "OK");
  CHECK(CheckChain(Repeat(server, kMaxChainCertificates + 1)).message() ==
        absl::StrCat("a chain of ", kMaxChainCertificates + 1,
                     " certificates, over the limit of ", kMaxChainCertificates,
                     " (each handshake sends it whole)"));
}

TEST_CASE("ExpiresSoon names the first certificate expiring within the span") {
  MakeCertificates();
  using std::chrono::hours;
  // expired.crt ends at 2021-01-01 00:00:00 UTC.
  CHECK(ExpiresSoon(Read("expired.crt"), hours(49), Utc(2020, 12, 30)) ==
        "certificate 1 (CN=localhost) expires at 2021-01-01 00:00:00 UTC, in "
        "2.0 days");
  CHECK(ExpiresSoon(Read("expired.crt"), hours(47), Utc(2020, 12, 30)) ==
        std::nullopt);
  // In a chain: the second; the first (until 2100) is not soon.
  const auto second =
      ExpiresSoon(Read("future.crt") + Read("server.crt"), hours(24 * 7));
  REQUIRE(second.has_value());
  CHECK(absl::StartsWith(*second, "certificate 2 (CN=localhost) expires at "));
  CHECK(ExpiresSoon(Read("future.crt"), hours(24 * 7)) == std::nullopt);
  CHECK(ExpiresSoon(Read("server.crt"), hours(24)) == std::nullopt);
}

TEST_CASE(
    "CheckKeyPair: the key must be unencrypted PEM and belong to the first "
    "certificate") {
  MakeCertificates();
  CHECK(Text(CheckKeyPair(Read("server.crt"), Read("server.key"))) == "OK");
  // A chain starts with its leaf.
  CHECK(Text(CheckKeyPair(Read("server.crt") + Read("ca.crt"),
                          Read("server.key"))) == "OK");
  CHECK(CheckKeyPair(Read("ca.crt") + Read("server.crt"), Read("server.key"))
            .message() == "the private key does not belong to the certificate");
  const absl::Status other =
      CheckKeyPair(Read("server.crt"), Read("client.key"));
  CHECK(other.code() == absl::StatusCode::kInvalidArgument);
  CHECK(other.message() ==
        "the private key does not belong to the certificate");
  CHECK(absl::StartsWith(
      CheckKeyPair(Read("server.crt"), Extras().Read("encrypted.key"))
          .message(),
      "no unencrypted PEM private key ("));
  CHECK(absl::StartsWith(
      CheckKeyPair(Read("server.crt"), Read("server.crt")).message(),
      "no unencrypted PEM private key ("));
  CHECK(absl::StartsWith(
      CheckKeyPair(Read("server.key"), Read("server.key")).message(),
      "no PEM certificate ("));
}

}  // namespace
}  // namespace aggregator
