#include "metrics/web_config.h"

#include <crypt.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/error.h"

namespace rg {
namespace {

namespace fs = std::filesystem;

// The exporter-toolkit keys roceguard does not implement: named as such,
// not as unknown, so that a file written for node_exporter says what to drop.
constexpr std::array kUnsupportedTlsKeys{"client_ca_file",  "cipher_suites", "curve_preferences",
                                         "prefer_server_cipher_suites", "client_allowed_sans"};
constexpr std::array kUnsupportedTopKeys{"http_server_config", "rate_limit"};
constexpr std::array kVersions{"TLS10", "TLS11", "TLS12", "TLS13"};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error("metrics.web_config: " + path_ + ": " + (key.empty() ? "" : key + ": ") + why, kExitUsage);
  }

  std::string scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(key, "expected a string");
    return n.as<std::string>();
  }

  // The file's contents; relative paths from the web config's directory.
  std::pair<std::string, std::string> file(const YAML::Node& n, const std::string& key) const {
    fs::path p = scalar(n, key);
    if (p.empty()) fail(key, "empty path");
    if (p.is_relative()) p = fs::path(path_).parent_path() / p;
    std::error_code ec;
    if (fs::is_directory(p, ec)) fail(key, p.string() + " is a directory");
    std::ifstream in(p, std::ios::binary);
    std::ostringstream text;
    if (!in || !(text << in.rdbuf())) fail(key, "cannot read " + p.string());
    return {p.string(), text.str()};
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

template <size_t N>
bool listed(const std::array<const char*, N>& list, const std::string& key) {
  for (const char* k : list)
    if (key == k) return true;
  return false;
}

int version_rank(const std::string& v) {
  for (size_t i = 0; i < kVersions.size(); ++i)
    if (v == kVersions[i]) return static_cast<int>(i);
  return -1;
}

WebTls read_tls(const Reader& r, const YAML::Node& node) {
  const std::string base = "tls_server_config";
  if (!node.IsMap()) r.fail(base, "expected a mapping");
  WebTls tls;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = base + "." + key;
    if (key == "cert_file") {
      std::tie(tls.cert_file, tls.cert_pem) = r.file(kv.second, full);
      if (tls.cert_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
        r.fail(full, tls.cert_file + " holds no PEM certificate");
    } else if (key == "key_file") {
      std::tie(tls.key_file, tls.key_pem) = r.file(kv.second, full);
      if (tls.key_pem.find("-----BEGIN ") == std::string::npos ||
          tls.key_pem.find("PRIVATE KEY-----") == std::string::npos)
        r.fail(full, tls.key_file + " holds no PEM private key");
      if (tls.key_pem.find("ENCRYPTED") != std::string::npos)
        r.fail(full, tls.key_file + " is encrypted; give the key without a passphrase");
    } else if (key == "min_version" || key == "max_version") {
      const std::string v = r.scalar(kv.second, full);
      if (version_rank(v) < 0) r.fail(full, "\"" + v + "\" is not one of TLS10, TLS11, TLS12, TLS13");
      (key == "min_version" ? tls.min_version : tls.max_version) = v;
    } else if (key == "client_auth_type") {
      const std::string v = r.scalar(kv.second, full);
      if (v != "NoClientCert")
        r.fail(full, "\"" + v + "\" is not supported: roceguard does not verify client certificates "
                     "(NoClientCert only; use basic_auth_users)");
    } else if (listed(kUnsupportedTlsKeys, key)) {
      r.fail(full, "not supported by roceguard (supported: cert_file, key_file, min_version, max_version, "
                   "client_auth_type: NoClientCert)");
    } else {
      r.fail(full, "unknown key");
    }
  }
  if (tls.cert_file.empty()) r.fail(base + ".cert_file", "missing (TLS needs a certificate and its key)");
  if (tls.key_file.empty()) r.fail(base + ".key_file", "missing (TLS needs a certificate and its key)");
  if (!tls.max_version.empty() && version_rank(tls.max_version) < version_rank(tls.min_version))
    r.fail(base + ".max_version", tls.max_version + " is below min_version " + tls.min_version);
  return tls;
}

// crypt_r's answer for password against setting ("" when it refused).
std::string bcrypt(const std::string& password, const std::string& setting) {
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_r(password.c_str(), setting.c_str(), data.get());
  if (!out || out[0] == '*') return "";
  return out;
}

bool is_bcrypt(const std::string& hash) {
  return hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$");
}

// Compared in full whatever differs first.
bool same(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& shorter = a.size() < b.size() ? a : b;
  const std::string& longer = a.size() < b.size() ? b : a;
  for (size_t i = 0; i < longer.size(); ++i)
    diff |= static_cast<unsigned char>(longer[i] ^ (i < shorter.size() ? shorter[i] : 0));
  return diff == 0;
}

// What an unknown user's password is checked against: a hash of the
// highest cost among the configured users (the cost is the work, so a
// fixed one would tell a user of another cost from a name that is none).
// Its salt and digest match no password's; bcrypt spends the cost anyway.
std::string unknown_user_hash(const WebConfig& config) {
  constexpr size_t kSettingLen = 7;  // "$2b$10$": variant, cost, separator
  std::string setting;
  for (const auto& [name, hash] : config.users)
    if (setting.empty() || hash.compare(4, 2, setting, 4, 2) > 0) setting = hash.substr(0, kSettingLen);
  if (setting.empty()) setting = "$2b$10$";
  return setting + std::string(53, 'A');
}

}  // namespace

std::string WebTls::priorities() const {
  std::string p = "NORMAL:-VERS-ALL";
  const int lo = version_rank(min_version);
  const int hi = max_version.empty() ? static_cast<int>(kVersions.size()) - 1 : version_rank(max_version);
  for (int v = lo; v <= hi; ++v) p += ":+VERS-TLS1." + std::to_string(v);
  return p;
}

WebConfig load_web_config(const std::string& path) {
  Reader r(path);
  WebConfig config;
  config.path = path;
  YAML::Node root;
  {
    std::ifstream in(path);
    if (!in) r.fail("", "cannot open the file");
  }
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    r.fail("", std::string("not valid YAML: ") + e.what());
  }
  if (root.IsNull()) return config;  // an empty file: plain HTTP, no authentication
  if (!root.IsMap()) r.fail("", "expected a mapping of tls_server_config and basic_auth_users");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "tls_server_config") {
        if (!kv.second.IsNull()) config.tls = read_tls(r, kv.second);
      } else if (key == "basic_auth_users") {
        if (kv.second.IsNull()) continue;
        if (!kv.second.IsMap()) r.fail(key, "expected a mapping of user: bcrypt hash");
        for (const auto& user : kv.second) {
          const std::string name = user.first.as<std::string>();
          const std::string full = key + "." + name;
          if (name.empty() || name.find(':') != std::string::npos)
            r.fail(full, "a user name is not empty and has no ':'");
          const std::string hash = r.scalar(user.second, full);
          if (!is_bcrypt(hash) || bcrypt("", hash).empty())
            r.fail(full, "not a bcrypt hash ($2a$, $2b$ or $2y$; make one with htpasswd -nBC 10 \"\")");
          config.users[name] = hash;
        }
      } else if (listed(kUnsupportedTopKeys, key)) {
        r.fail(key, "not supported by roceguard (supported: tls_server_config, basic_auth_users)");
      } else {
        r.fail(key, "unknown key");
      }
    }
  } catch (const YAML::Exception& e) {
    r.fail("", std::string("not valid YAML: ") + e.what());
  }
  return config;
}

bool basic_auth_matches(const WebConfig& config, const std::string& user, const std::string& password) {
  const auto it = config.users.find(user);
  const std::string hash = it == config.users.end() ? unknown_user_hash(config) : it->second;
  const std::string got = bcrypt(password, hash);
  return same(got, hash) && it != config.users.end() && !got.empty();
}

}  // namespace rg
