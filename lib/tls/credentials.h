// gRPC credentials from PEM text: a server's, whose certificate can be
// replaced while it serves, and a client's, for the calls to one peer.
//
// Thread-safety: ServerTls may be updated from any thread while handshakes
// read it.
#ifndef LIB_TLS_CREDENTIALS_H_
#define LIB_TLS_CREDENTIALS_H_

#include <grpc/grpc_security.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/base/mutex.h"

namespace aggregator {

// What a TLS listener presents and whom it lets in (PEM text, not paths).
struct ServerIdentity {
  std::string cert_chain;
  std::string private_key;
  // Set: clients must present a certificate this CA signed (mTLS).
  std::string client_ca;
};

// A TLS listener's certificate, key and client CA, replaceable while it
// serves: every new connection's handshake takes the latest (gRPC's
// certificate-config fetcher); connections already made keep theirs. Whether
// client certificates are required is fixed when the listener starts.
class ServerTls {
 public:
  explicit ServerTls(ServerIdentity identity);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // For one listener (each keeps track of what it has fetched). Must not
  // outlive this object.
  std::shared_ptr<grpc::ServerCredentials> Credentials();

  // New connections get `identity` from now on. Its client CA must be set if
  // and only if it was at construction (checked by the configuration).
  void Update(ServerIdentity identity);

  bool requires_client_cert() const { return requires_client_cert_; }

 private:
  struct Listener;
  // gRPC's callback, at every new connection's handshake.
  static grpc_ssl_certificate_config_reload_status Fetch(
      void* listener, grpc_ssl_server_certificate_config** config);
  grpc_ssl_certificate_config_reload_status FetchFor(
      Listener* listener, grpc_ssl_server_certificate_config** config)
      ABSL_LOCKS_EXCLUDED(mu_);

  const bool requires_client_cert_;
  Mutex mu_;
  ServerIdentity identity_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::unique_ptr<Listener>> listeners_ ABSL_GUARDED_BY(mu_);
};

// What a client trusts and presents (PEM text).
struct ClientIdentity {
  std::string ca;           // empty: the system's roots
  std::string cert_chain;   // optional: for peers that require mTLS
  std::string private_key;  // with cert_chain
};

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(
    const ClientIdentity& identity);

}  // namespace aggregator

#endif  // LIB_TLS_CREDENTIALS_H_
