// The metrics endpoint's web configuration file (metrics.web_config): TLS
// and HTTP basic authentication in the format of the Prometheus exporters'
// --web.config.file (exporter-toolkit), the subset roceguard's HTTP server
// can honour. Every other key is refused, never ignored: a file written for
// node_exporter that asks for more than this subset does not start an
// endpoint weaker than it asked for.
//
//   tls_server_config:
//     cert_file: server.crt        # PEM certificate chain
//     key_file: server.key         # PEM private key
//     min_version: TLS12           # TLS10..TLS13, default TLS12
//     max_version: TLS13           # default: the newest the library has
//     client_auth_type: NoClientCert   # the only value supported
//   basic_auth_users:
//     prometheus: $2y$10$...       # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//
// Relative paths are relative to the file's directory.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace rg {

struct WebTls {
  std::string cert_file, key_file;  // as resolved
  std::string cert_pem, key_pem;    // their contents, read when loaded
  std::string min_version = "TLS12";
  std::string max_version;          // "" for no upper bound
  // The GnuTLS priority string of the version range.
  std::string priorities() const;
  bool operator==(const WebTls&) const = default;
};

struct WebConfig {
  std::string path;
  std::optional<WebTls> tls;
  std::map<std::string, std::string> users;  // user -> bcrypt hash; empty: no authentication
  // Equal: the same file with the same certificate, key and users.
  bool operator==(const WebConfig&) const = default;
};

// Reads and checks the file, the certificate and key it names included.
// Throws rg::Error (kExitUsage) "metrics.web_config: <path>: <key>: why".
WebConfig load_web_config(const std::string& path);

// True when user and password match one of users' bcrypt hashes. An
// unknown user costs a bcrypt of the highest cost among users, so the
// answer takes as long as a wrong password's (of a user of that cost).
bool basic_auth_matches(const WebConfig& config, const std::string& user, const std::string& password);

}  // namespace rg
