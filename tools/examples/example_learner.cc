// example_learner: a Learner server for demos, tests and benchmarks, with fault
// injection, and TLS / mTLS with --tls-*. Prints "example_learner listening on
// <address>" once it serves; stops on SIGTERM or SIGINT.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/testing/example_learner_service.h"

namespace {

// A PEM file's text (CLI11 has checked that it exists).
std::string ReadAll(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  aggregator::ExampleLearnerOptions options;
  std::string listen = "127.0.0.1:22300";
  int64_t delay_ms = 0;
  int64_t max_message_bytes = int64_t{1} << 30;
  CLI::App app{"example_learner: a demo Learner server"};
  app.add_option("--listen", listen, "address to serve on (port 0: any)");
  app.add_option("--batch-size", options.batch_size,
                 "samples demanded by GetData")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpus", options.gpus, "gpus reported by GetResource")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--delay-ms", delay_ms,
                 "wait this long in every RPC (or the one --delay-on names)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--delay-on", options.delay_on,
                 "the RPC --delay-ms applies to")
      ->check(CLI::IsMember(
          {"GetResource", "StartTask", "GetData", "Learn", "CloseTask"}));
  app.add_option("--fail-on", options.fail_on,
                 "an RPC that always fails with INTERNAL")
      ->check(CLI::IsMember(
          {"GetResource", "StartTask", "GetData", "Learn", "CloseTask"}));
  app.add_option("--crash-after", options.crash_after,
                 "exit abruptly when the RPC after this many (GetResource not "
                 "counted) arrives");
  app.add_flag("--omit-priorities", options.omit_priorities,
               "answer Learn without priority_info.priority");
  app.add_option("--fault-file", options.fault_file,
                 "a file read at every RPC whose settings (delay_ms=N "
                 "delay_on=METHOD fail_on=METHOD) replace the fault flags "
                 "while it exists");
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  auto* cert = app.add_option("--tls-cert", tls_cert,
                              "serve TLS with this certificate chain (PEM)")
                   ->check(CLI::ExistingFile);
  auto* key = app.add_option("--tls-key", tls_key,
                             "the private key of --tls-cert (PEM)")
                  ->check(CLI::ExistingFile);
  cert->needs(key);
  key->needs(cert);
  app.add_option("--tls-client-ca", tls_client_ca,
                 "require client certificates signed by this CA (mTLS)")
      ->check(CLI::ExistingFile)
      ->needs(cert);
  app.add_option("--max-message-bytes", max_message_bytes,
                 "largest message accepted or sent")
      ->check(CLI::Range(int64_t{1024}, int64_t{2147483647}));
  CLI11_PARSE(app, argc, argv);
  options.delay = std::chrono::milliseconds(delay_ms);

  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!tls_cert.empty()) {
    grpc::SslServerCredentialsOptions tls(
        tls_client_ca.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    tls.pem_key_cert_pairs.push_back({ReadAll(tls_key), ReadAll(tls_cert)});
    if (!tls_client_ca.empty()) tls.pem_root_certs = ReadAll(tls_client_ca);
    credentials = grpc::SslServerCredentials(tls);
  }
  auto server = aggregator::StartExampleLearner(options, listen,
                                                max_message_bytes, credentials);
  if (!server.ok()) {
    std::cerr << "example_learner: " << server.status().message() << "\n";
    return 2;
  }
  std::cout << "example_learner listening on " << (*server)->address
            << std::endl;
  int signo = 0;
  sigwait(&signals, &signo);
  (*server)->Shutdown();
  return 0;
}
