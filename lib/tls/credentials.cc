#include "lib/tls/credentials.h"

#include <grpc/grpc.h>

#include <utility>

namespace aggregator {
namespace {

// A ServerCredentials around gRPC core's own, so a listener can use core's
// certificate-config fetcher, which the C++ SslServerCredentials does not
// offer. gRPC's Server binds a port through AddPortToServer.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* credentials)
      : credentials_(credentials) {}
  ~CoreServerCredentials() override {
    grpc_server_credentials_release(credentials_);
  }
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), credentials_);
  }

  grpc_server_credentials* const credentials_;
};

// A self-signed certificate whose key was thrown away when it was made: it
// signs nothing, so it lets nobody in.
constexpr char kNoClientRoots[] = R"(-----BEGIN CERTIFICATE-----
MIIB5zCCAY2gAwIBAgIUDsUmjzaM31NvDu0ZeAjMi5x6kAkwCgYIKoZIzj0EAwIw
SDFGMEQGA1UEAww9YWdncmVnYXRvcmQgcGxhY2Vob2xkZXI6IG5vIGNsaWVudCBj
ZXJ0aWZpY2F0ZXMgYXJlIHJlcXVlc3RlZDAgFw0yNjEyMDYwMDMyNTVaGA8yMTI2
MTExMjAwMzI1NVowSDFGMEQGA1UEAww9YWdncmVnYXRvcmQgcGxhY2Vob2xkZXI6
IG5vIGNsaWVudCBjZXJ0aWZpY2F0ZXMgYXJlIHJlcXVlc3RlZDBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABAgq7Z1pXIIi7JX7cJ3hEoVl4wGTwNnQ7lMJFkeh0qt6
G11Cfetpdvz4ybur04uNNTC84o/sybVtF1UHeDdPf9KjUzBRMB0GA1UdDgQWBBQV
DTmKzXDA2vTWDNqXEAoUEXTM2jAfBgNVHSMEGDAWgBQVDTmKzXDA2vTWDNqXEAoU
EXTM2jAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQD3UDwLUJIa
aJn2oTIjFmrQ937hgyR0o4HXvb5/PfC4RQIgWEVG9UUa/+fnoSrCFJEknq2/Bgj5
KH0vdkBs2FgGmXc=
-----END CERTIFICATE-----
)";

}  // namespace

struct ServerTls::Listener {
  ServerTls* owner;
  uint64_t fetched = 0;  // the generation this listener last took
};

ServerTls::ServerTls(ServerIdentity identity)
    : requires_client_cert_(!identity.client_ca.empty()),
      identity_(std::move(identity)) {}

ServerTls::~ServerTls() = default;

std::shared_ptr<grpc::ServerCredentials> ServerTls::Credentials() {
  Listener* listener = nullptr;
  {
    MutexLock lock(&mu_);
    listeners_.push_back(std::make_unique<Listener>(Listener{this}));
    listener = listeners_.back().get();
  }
  grpc_ssl_server_credentials_options* options =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          requires_client_cert_
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          &ServerTls::Fetch, listener);
  // Takes ownership of the options.
  return std::make_shared<CoreServerCredentials>(
      grpc_ssl_server_credentials_create_with_options(options));
}

void ServerTls::Update(ServerIdentity identity) {
  MutexLock lock(&mu_);
  identity_ = std::move(identity);
  ++generation_;
}

grpc_ssl_certificate_config_reload_status ServerTls::Fetch(
    void* user_data, grpc_ssl_server_certificate_config** config) {
  auto* listener = static_cast<Listener*>(user_data);
  return listener->owner->FetchFor(listener, config);
}

grpc_ssl_certificate_config_reload_status ServerTls::FetchFor(
    Listener* listener, grpc_ssl_server_certificate_config** config) {
  MutexLock lock(&mu_);
  if (listener->fetched == generation_) {
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  }
  grpc_ssl_pem_key_cert_pair pair = {identity_.private_key.c_str(),
                                     identity_.cert_chain.c_str()};
  // gRPC copies the strings and takes ownership of the config. gRPC 1.51's
  // core aborts without a client root list even when it asks for no client
  // certificate (and then never uses it): a fixed placeholder stands in, not
  // our own chain (parsed into a store at every new config, up to its limit,
  // and trusting whatever our CA signed should client certificates ever be
  // asked for).
  const char* roots = identity_.client_ca.empty() ? kNoClientRoots
                                                  : identity_.client_ca.c_str();
  *config = grpc_ssl_server_certificate_config_create(roots, &pair, 1);
  listener->fetched = generation_;
  return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(
    const ClientIdentity& identity) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = identity.ca;
  options.pem_private_key = identity.private_key;
  options.pem_cert_chain = identity.cert_chain;
  return grpc::SslCredentials(options);
}

}  // namespace aggregator
