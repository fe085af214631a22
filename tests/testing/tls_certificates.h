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
