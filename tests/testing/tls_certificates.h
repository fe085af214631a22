// Certificates for TLS tests, made with the openssl command at test time, and
// the shell helper that makes them.
#ifndef TESTS_TESTING_TLS_CERTIFICATES_H_
#define TESTS_TESTING_TLS_CERTIFICATES_H_

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/process_helpers.h"

namespace aggregator::testing {

// Runs a shell script, failing the test with its output if it fails.
inline void Shell(const std::string& script) {
  auto process = Spawn({"/bin/sh", "-ec", script + " 2>&1"});
  const std::string out = ReadAll(*process, /*from_stderr=*/false);
  auto exit = process->Wait(std::chrono::steady_clock::now() + kLongWait);
  INFO(script << "\n" << out);
  REQUIRE(exit.ok());
  REQUIRE(exit->ok());
}

// Two CAs, and certificates they sign, in a temporary directory:
//   ca, other-ca                    the CAs
//   server      (ca, localhost)     server-b (ca, localhost: the rotated one)
//   wrong-name  (ca, elsewhere.example)
//   client      (ca)                stranger (other-ca)
//   expired     (ca, localhost, 2020-2021)
//   future      (ca, localhost, 2099-2100)
// (each valid for 2 days otherwise: every one expires within a week)
struct Certificates {
  Certificates() : dir(testing::TempDir()) {
    Shell("cd " + dir +
          " && for ca in ca other-ca; do"
          "  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=$ca"
          "    -keyout $ca.key -out $ca.crt >/dev/null;"
          " done");
    Sign("server", "ca", "localhost");
    Sign("server-b", "ca", "localhost");
    Sign("wrong-name", "ca", "elsewhere.example");
    Sign("client", "ca", "client");
    Sign("stranger", "other-ca", "client");
    SignDated("expired", "ca", "localhost", "20200101000000Z",
              "20210101000000Z");
    SignDated("future", "ca", "localhost", "20991201000000Z",
              "21001201000000Z");
  }

  void Sign(const std::string& name, const std::string& ca,
            const std::string& host) {
    Shell("cd " + dir + " && openssl req -newkey rsa:2048 -nodes -subj /CN=" +
          host + " -keyout " + name + ".key -out " + name +
          ".csr >/dev/null && printf 'subjectAltName=DNS:" + host + "\\n' > " +
          name + ".ext && openssl x509 -req -in " + name + ".csr -CA " + ca +
          ".crt -CAkey " + ca + ".key -CAcreateserial -days 2 -extfile " +
          name + ".ext -out " + name + ".crt >/dev/null");
  }

  // `name`.crt/.key, signed by `ca` for `host`, valid from `start` to `end`
  // ("YYYYMMDDHHMMSSZ", either side of now): an expired or not yet valid
  // certificate (openssl ca sets any dates; openssl x509 only -days).
  void SignDated(const std::string& name, const std::string& ca,
                 const std::string& host, const std::string& start,
                 const std::string& end) {
    Shell("cd " + dir + " && openssl req -newkey rsa:2048 -nodes -subj /CN=" +
          host + " -keyout " + name + ".key -out " + name +
          ".csr >/dev/null && mkdir -p " + name + ".db && cd " + name +
          ".db && : > index.txt && echo 01 > serial && printf '"
          "[ca]\\ndefault_ca = c\\n[c]\\ndatabase = index.txt\\n"
          "new_certs_dir = .\\nserial = serial\\ndefault_md = sha256\\n"
          "policy = p\\nunique_subject = no\\n[p]\\n"
          "commonName = supplied\\n' > ca.cnf && openssl ca -batch -notext "
          "-config ca.cnf -cert ../" +
          ca + ".crt -keyfile ../" + ca + ".key -in ../" + name +
          ".csr -startdate " + start + " -enddate " + end + " -out ../" + name +
          ".crt >/dev/null");
  }

  std::string Path(const std::string& file) const { return dir + "/" + file; }
  std::string Read(const std::string& file) const {
    std::ifstream in(Path(file), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    REQUIRE(in);
    return text.str();
  }

  std::string dir;
};

inline const Certificates& Certs() {
  static const Certificates* certs = new Certificates();
  return *certs;
}

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_TLS_CERTIFICATES_H_
