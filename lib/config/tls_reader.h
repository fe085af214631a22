// The tls sections: the server's (`tls`) and a client's (`learner_tls`, a
// learner's `tls`). With `read_files`, the PEM files they name are read
// (relative to the configuration file) and checked, and a key must match its
// certificate; without, only their paths are kept.
#ifndef LIB_CONFIG_TLS_READER_H_
#define LIB_CONFIG_TLS_READER_H_

#include <optional>

#include "lib/config/config.h"
#include "lib/config/yaml_reader.h"

namespace aggregator {

// tls: cert and key (both), client_ca (optional).
void ReadServerTls(YamlReader* reader, const Field& field, bool read_files,
                   std::optional<ServerTlsConfig>* out);

// learner_tls, or a learner's tls: ca, cert and key (optional, both or
// neither), server_name.
void ReadClientTls(YamlReader* reader, const Field& field, bool read_files,
                   std::optional<ClientTlsConfig>* out);

}  // namespace aggregator

#endif  // LIB_CONFIG_TLS_READER_H_
