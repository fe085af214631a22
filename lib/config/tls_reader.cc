#include "lib/config/tls_reader.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/config/file_reader.h"
#include "lib/config/typed_readers.h"
#include "lib/tls/pem.h"

namespace aggregator {
namespace {

class TlsReader {
 public:
  TlsReader(YamlReader* reader, bool read_files)
      : reader_(reader), read_files_(read_files) {}

  // A certificate and its key, both given (or, unless `required`, neither);
  // they must belong together.
  bool ReadIdentity(const Field& section, const std::optional<Field>& cert,
                    const std::optional<Field>& key, bool required,
                    PemFile* cert_out, PemFile* key_out) {
    if (!cert && !key && !required) return true;
    if (!cert || !key) {
      reader_->Error(section,
                     absl::StrCat("needs both \"cert\" and \"key\" (",
                                  !cert ? "cert" : "key", " is missing)"));
      return false;
    }
    const bool cert_ok = ReadCertificates(*cert, cert_out);
    const bool key_ok = ReadPem(*key, key_out);
    if (!cert_ok || !key_ok) return false;
    if (!read_files_) return true;
    // The peer checks the whole chain: each certificate must be valid now.
    if (absl::Status valid = CheckChain(cert_out->pem); !valid.ok()) {
      reader_->Error(
          *cert, absl::StrCat(Quote(cert_out->path), ": ", valid.message()));
      return false;
    }
    if (absl::Status pair = CheckKeyPair(cert_out->pem, key_out->pem);
        !pair.ok()) {
      reader_->Error(*key,
                     absl::StrCat(Quote(key_out->path), " with ",
                                  Quote(cert_out->path), ": ", pair.message()));
      return false;
    }
    return true;
  }

  // A PEM file of one or more certificates.
  bool ReadCertificates(const Field& field, PemFile* out) {
    if (!ReadPem(field, out)) return false;
    if (!read_files_) return true;
    if (absl::Status status = CheckCertificates(out->pem); !status.ok()) {
      reader_->Error(field,
                     absl::StrCat(Quote(out->path), ": ", status.message()));
      return false;
    }
    return true;
  }

  // A non-empty path, and the file's text when files are read.
  bool ReadPem(const Field& field, PemFile* out) {
    if (!ReadString(reader_, field, &out->path)) return false;
    if (out->path.empty()) {
      reader_->Error(field, "must not be empty (a PEM file's path)");
      return false;
    }
    if (!read_files_) return true;
    out->pem.clear();
    // A relative path is relative to the configuration file, wherever the
    // daemon runs from.
    const std::string& source = reader_->source();
    std::string path = out->path;
    if (path[0] != '/' && source.find('/') != std::string::npos) {
      path = source.substr(0, source.rfind('/') + 1) + path;
    }
    if (absl::Status status = ReadBoundedFile(path, "PEM file", &out->pem);
        !status.ok()) {
      reader_->Error(field, status.message());
      return false;
    }
    return true;
  }

 private:
  YamlReader* reader_;
  const bool read_files_;
};

}  // namespace

void ReadServerTls(YamlReader* reader, const Field& field, bool read_files,
                   std::optional<ServerTlsConfig>* out) {
  TlsReader tls_reader(reader, read_files);
  ServerTlsConfig tls;
  std::optional<Field> cert, key, client_ca;
  reader->ReadMap(field,
                  {{"cert", [&](const Field& f) { cert = f; }},
                   {"key", [&](const Field& f) { key = f; }},
                   {"client_ca", [&](const Field& f) { client_ca = f; }}});
  if (!tls_reader.ReadIdentity(field, cert, key, /*required=*/true, &tls.cert,
                               &tls.key)) {
    return;
  }
  if (client_ca) tls_reader.ReadCertificates(*client_ca, &tls.client_ca);
  *out = std::move(tls);
}

void ReadClientTls(YamlReader* reader, const Field& field, bool read_files,
                   std::optional<ClientTlsConfig>* out) {
  TlsReader tls_reader(reader, read_files);
  ClientTlsConfig tls;
  std::optional<Field> cert, key;
  reader->ReadMap(
      field,
      {{"ca", [&](const Field& f) { tls_reader.ReadCertificates(f, &tls.ca); }},
       {"cert", [&](const Field& f) { cert = f; }},
       {"key", [&](const Field& f) { key = f; }},
       {"server_name",
        [&](const Field& f) { ReadString(reader, f, &tls.server_name); }}});
  if (!tls_reader.ReadIdentity(field, cert, key, /*required=*/false, &tls.cert,
                               &tls.key)) {
    return;
  }
  *out = std::move(tls);
}

}  // namespace aggregator
