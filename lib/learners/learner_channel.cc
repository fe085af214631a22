#include "lib/learners/learner_channel.h"

#include <grpc/grpc_security.h>

#include <string>
#include <utility>
#include <vector>

namespace aggregator {

LearnerChannel MakeLearnerChannel(const LearnerEndpoint& endpoint,
                                  grpc::ChannelArguments args) {
  grpc_init();  // for the credentials; the channel holds gRPC itself
  // The credentials grpc::SslCredentials (lib/tls's ClientCredentials) and
  // grpc::InsecureChannelCredentials would make, at core's level.
  grpc_channel_credentials* credentials = nullptr;
  std::string name_override;  // what CreateCustomChannel takes from `args`
  if (const auto& tls = endpoint.tls) {
    const std::string& key = tls->key.pem;
    const std::string& cert = tls->cert.pem;
    grpc_ssl_pem_key_cert_pair pair = {key.c_str(), cert.c_str()};
    credentials = grpc_ssl_credentials_create(
        tls->ca.pem.empty() ? nullptr : tls->ca.pem.c_str(),
        key.empty() ? nullptr : &pair, nullptr, nullptr);
    if (!tls->server_name.empty()) {
      name_override = tls->server_name;
      args.SetSslTargetNameOverride(name_override);
    }
  } else {
    credentials = grpc_insecure_credentials_create();
  }
  grpc_channel_args core_args;
  args.SetChannelArgs(&core_args);
  grpc_channel* core = grpc_channel_create(endpoint.address.ToString().c_str(),
                                           credentials, &core_args);
  grpc_channel_credentials_release(credentials);
  LearnerChannel made{
      grpc::CreateChannelInternal(
          name_override, core,
          std::vector<std::unique_ptr<
              grpc::experimental::ClientInterceptorFactoryInterface>>()),
      core};
  grpc_shutdown();
  return made;
}

}  // namespace aggregator
