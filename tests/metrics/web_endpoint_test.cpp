// The metrics endpoint as node_exporter's: TLS and basic authentication
// from a web configuration file (metrics.web_config), checked with curl,
// promtool and a real Prometheus; and the file's mistakes, each refused
// with exit code 2 and the key at fault named. Certificates are made with
// openssl for each test and removed with its temporary directory.
#include <crypt.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "common/error.h"
#include "metrics/exporter.h"
#include "metrics/web_config.h"
#include "scrape.h"

namespace rg::test {
namespace {

// A bcrypt hash of password at the lowest cost libxcrypt takes.
std::string bcrypt_hash(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt))) throw std::runtime_error("crypt_gensalt_rn");
  crypt_data data{};
  const char* hash = crypt_r(password.c_str(), salt, &data);
  if (!hash || hash[0] == '*') throw std::runtime_error("crypt_r");
  return hash;
}

// A self-signed certificate for 127.0.0.1, ::1 and localhost, and its key.
struct Certificate {
  explicit Certificate(const std::string& dir) : cert(dir + "/server.crt"), key(dir + "/server.key") {
    const CommandResult r = run_command(
        {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=roceguard-test",
         "-addext", "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"});
    if (r.exit_code != 0) throw std::runtime_error("openssl req: " + r.output);
  }
  std::string cert, key;
};

struct Endpoint {
  explicit Endpoint(const std::string& web_config, const std::string& listen = "127.0.0.1:0") {
    // No pinned maps: the series that do not need them (build, process,
    // scrape errors) are enough for the endpoint's tests.
    ExporterOptions o;
    o.listen = listen;
    o.pin_path = "/nonexistent";
    o.web_config = web_config;
    ex = std::make_unique<Exporter>(o);
  }
  std::string url(const std::string& scheme, const std::string& path = "/metrics") const {
    return scheme + "://" + ex->listen_address() + path;
  }
  std::unique_ptr<Exporter> ex;
};

class WebConfigTest : public ::testing::Test {
 protected:
  WebConfigTest() : tmp_("webcfg"), cert_(tmp_.path()) {}

  // A web configuration file with TLS (relative paths: they are the
  // file's directory's) and the users given.
  std::string write_config(const std::string& users_yaml, bool tls = true) {
    std::string text;
    if (tls) text += "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    if (!users_yaml.empty()) text += "basic_auth_users:\n" + users_yaml;
    const std::string path = tmp_.path() + "/web.yml";
    write_file(path, text);
    return path;
  }

  TempDir tmp_;
  Certificate cert_;
};

TEST_F(WebConfigTest, TlsWithBasicAuthAnswersOnlyTheRightCredentials) {
  Endpoint ep(write_config("  prometheus: " + bcrypt_hash("s3cret pass") + "\n  other: " + bcrypt_hash("x") + "\n"));
  const std::vector<std::string> ca{"--cacert", cert_.cert};

  CurlReply none = curl_get(ep.url("https"), ca);
  EXPECT_EQ(none.status, 401) << none.error;
  EXPECT_NE(none.headers.find("WWW-Authenticate: Basic realm=\"roceguard\""), std::string::npos) << none.headers;
  EXPECT_EQ(none.body.find("roceguard_"), std::string::npos);

  for (const char* wrong : {"prometheus:wrong", "prometheus:", "prometheus:s3cret pas", "nobody:s3cret pass",
                            "other:s3cret pass", "Prometheus:s3cret pass"}) {
    std::vector<std::string> args = ca;
    args.insert(args.end(), {"--user", wrong});
    CurlReply r = curl_get(ep.url("https"), args);
    EXPECT_EQ(r.status, 401) << wrong;
    EXPECT_EQ(r.body.find("roceguard_"), std::string::npos) << wrong;
  }
  // Every path asks for credentials first.
  EXPECT_EQ(curl_get(ep.url("https", "/nothing"), ca).status, 401);

  std::vector<std::string> args = ca;
  args.insert(args.end(), {"--user", "prometheus:s3cret pass"});
  CurlReply ok = curl_get(ep.url("https"), args);
  ASSERT_EQ(ok.status, 200) << ok.error;
  const auto samples = parse_exposition(ok.body);
  EXPECT_EQ(value_of(samples, "roceguard_maps_up"), 0);
  const CommandResult check = promtool_check_metrics(ok.body);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(curl_get(ep.url("https", "/nothing"), args).status, 404);

  // Without the CA the certificate is not trusted; plain HTTP gets no scrape.
  EXPECT_EQ(curl_get(ep.url("https"), {"--user", "prometheus:s3cret pass"}).status, 0);
  EXPECT_NE(curl_get(ep.url("http"), {"--user", "prometheus:s3cret pass"}).status, 200);
}

TEST_F(WebConfigTest, TlsWithoutUsersServesAnyone) {
  Endpoint ep(write_config(""));
  EXPECT_EQ(ep.ex->metrics_url(), ep.url("https"));
  EXPECT_EQ(Endpoint("").ex->metrics_url().rfind("http://127.0.0.1:", 0), 0u);
  CurlReply r = curl_get(ep.url("https"), {"--cacert", cert_.cert});
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(promtool_check_metrics(r.body).exit_code, 0);
}

TEST_F(WebConfigTest, BasicAuthWithoutTls) {
  Endpoint ep(write_config("  prometheus: " + bcrypt_hash("pw") + "\n", false));
  EXPECT_EQ(curl_get(ep.url("http")).status, 401);
  EXPECT_EQ(curl_get(ep.url("http"), {"--user", "prometheus:nope"}).status, 401);
  EXPECT_EQ(curl_get(ep.url("http"), {"--user", "prometheus:pw"}).status, 200);
}

TEST_F(WebConfigTest, TlsOverIpv6) {
  Endpoint ep(write_config(""), "[::1]:0");
  CurlReply r = curl_get(ep.url("https"), {"--cacert", cert_.cert});
  EXPECT_EQ(r.status, 200) << ep.url("https") << ": " << r.error;
}

TEST_F(WebConfigTest, MinVersionRefusesOlderClients) {
  write_file(tmp_.path() + "/web.yml",
             "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\n");
  Endpoint ep(tmp_.path() + "/web.yml");
  EXPECT_EQ(curl_get(ep.url("https"), {"--cacert", cert_.cert, "--tls-max", "1.2"}).status, 0);
  EXPECT_EQ(curl_get(ep.url("https"), {"--cacert", cert_.cert, "--tlsv1.3"}).status, 200);

  Endpoint dflt(write_config(""));
  EXPECT_EQ(curl_get(dflt.url("https"), {"--cacert", cert_.cert, "--tls-max", "1.2"}).status, 200)
      << "TLS 1.2 is served by default";
}

// Every mistake stops the endpoint before it serves, with the file and the
// key in the message and exit code 2, in the exporter and in `config check`.
TEST_F(WebConfigTest, BadFilesNameTheKey) {
  const std::string dir = tmp_.path();
  write_file(dir + "/garbage.key", "not a key\n");
  const std::string tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
  const std::vector<std::pair<std::string, std::string>> cases = {  // file text, what the error names
      {"tls_server_config: [unclosed\n", "not valid YAML"},
      {"basic_auth_user:\n  a: b\n", "basic_auth_user: unknown key"},
      {"tls_server_config:\n  cert_file: server.crt\n  keyfile: server.key\n", "tls_server_config.keyfile: unknown key"},
      {"tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file: missing"},
      {"tls_server_config:\n  cert_file: server.crt\n  key_file: garbage.key\n",
       "tls_server_config.key_file: " + dir + "/garbage.key holds no PEM private key"},
      {"tls_server_config:\n  cert_file: server.crt\n  key_file: absent.key\n",
       "tls_server_config.key_file: cannot read " + dir + "/absent.key"},
      {"tls_server_config:\n  cert_file: server.crt\n  key_file: .\n", "tls_server_config.key_file: "},
      {"tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
       "tls_server_config.cert_file: " + dir + "/server.key holds no PEM certificate"},
      {tls + "  min_version: TLS14\n", "tls_server_config.min_version: \"TLS14\" is not one of"},
      {tls + "  client_auth_type: RequireAndVerifyClientCert\n", "tls_server_config.client_auth_type"},
      {tls + "  client_ca_file: server.crt\n", "tls_server_config.client_ca_file: not supported"},
      {"basic_auth_users:\n  prometheus: plaintext\n", "basic_auth_users.prometheus: not a bcrypt hash"},
      {"basic_auth_users:\n  prometheus:\n    - x\n", "basic_auth_users.prometheus: expected a string"},
      {"- a\n- b\n", "expected a mapping"},
  };
  for (const auto& [text, want] : cases) {
    const std::string path = dir + "/bad.yml";
    write_file(path, text);
    try {
      Endpoint ep(path);
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
      EXPECT_NE(std::string(e.what()).find("metrics.web_config: " + path + ": "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    write_file(dir + "/roceguard.toml", "interfaces = [\"lo\"]\n[metrics]\nweb_config = \"" + path + "\"\n");
    const CommandResult r = run_command({ROCEGUARD_BIN, "config", "check", dir + "/roceguard.toml"});
    EXPECT_EQ(r.exit_code, kExitUsage) << text << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }

  try {
    Endpoint ep(dir + "/absent.yml");
    ADD_FAILURE() << "a missing web configuration file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find(dir + "/absent.yml: cannot open the file"), std::string::npos) << e.what();
  }
  // run refuses it before serving, with the same message.
  const CommandResult r = run_command({ROCEGUARD_BIN, "run", "--dataplane", "false", "--interface", "lo",
                                       "--metrics-listen", "127.0.0.1:0", "--web-config", dir + "/absent.yml"},
                                      "/dev/null", 60);
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_NE(r.output.find("metrics.web_config: " + dir + "/absent.yml: cannot open the file"), std::string::npos)
      << r.output;
}

TEST_F(WebConfigTest, RealPrometheusScrapesOverTlsWithBasicAuth) {
  Endpoint ep(write_config("  prometheus: " + bcrypt_hash("scrape-pw") + "\n"));
  const uint16_t prom_port = free_port();
  write_file(tmp_.path() + "/prometheus.yml",
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: roceguard\n    scheme: https\n"
             "    tls_config:\n      ca_file: " + cert_.cert + "\n"
             "    basic_auth:\n      username: prometheus\n      password: scrape-pw\n"
             "    static_configs:\n      - targets: ['" + ep.ex->listen_address() + "']\n"
             "  - job_name: wrong-password\n    scheme: https\n"
             "    tls_config:\n      ca_file: " + cert_.cert + "\n"
             "    basic_auth:\n      username: prometheus\n      password: not-it\n"
             "    static_configs:\n      - targets: ['" + ep.ex->listen_address() + "']\n");
  const std::string log = tmp_.path() + "/prometheus.log";
  Child prom({"prometheus", "--config.file=" + tmp_.path() + "/prometheus.yml",
              "--storage.tsdb.path=" + tmp_.path() + "/data",
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
             log);
  std::map<std::string, std::string> up;  // job -> value of `up`
  const std::map<std::string, std::string> want{{"roceguard", "1"}, {"wrong-password", "0"}};
  std::string last;
  // Bounded: up to 240 polls half a second apart, while Prometheus starts
  // and scrapes both jobs.
  for (int i = 0; i < 240 && up != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_TRUE(prom.running()) << "prometheus exited:\n" << read_file(log);
    HttpReply r;
    try {
      r = http_get("127.0.0.1", prom_port, "/api/v1/query?query=up");
    } catch (const std::exception&) {
      continue;  // not listening yet
    }
    last = r.body;
    if (r.status != 200) continue;
    up.clear();
    const auto j = nlohmann::json::parse(r.body);
    for (const auto& res : j["data"]["result"])
      up[res["metric"]["job"].get<std::string>()] = res["value"][1].get<std::string>();
  }
  EXPECT_EQ(up, want) << "last answer: " << last << "\nlog:\n" << read_file(log);
}

// gzip for a client that asks for it (Prometheus does), the plain text
// for one that does not or refuses it with q=0.
// A reload (SIGHUP) through reconfigure(): the endpoint moves without a
// gap, the web configuration file is read again (a new password applies at
// the same path), an address the old endpoint holds is handed over, the
// probes come and go, and what cannot start changes nothing.
TEST_F(WebConfigTest, ReconfigureMovesTheEndpointAndReadsTheFileAgain) {
  Endpoint ep("");
  ExporterOptions next;
  next.listen = "127.0.0.1:0";
  next.pin_path = "/nonexistent";
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{}) << "nothing changed";
  const std::string first = ep.url("http");
  ASSERT_EQ(curl_get(first).status, 200);

  // Basic authentication from a file: a new endpoint (port 0 picks another
  // port), the old one closed.
  next.web_config = write_config("  prometheus: " + bcrypt_hash("old") + "\n", false);
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{"metrics.web_config"});
  const std::string second = ep.url("http");
  EXPECT_NE(second, first);
  EXPECT_EQ(curl_get(first).status, 0) << "the old endpoint is closed";
  EXPECT_EQ(curl_get(second).status, 401);
  EXPECT_EQ(curl_get(second, {"--user", "prometheus:old"}).status, 200);

  // The same path with a new password: read again, applied.
  write_config("  prometheus: " + bcrypt_hash("new") + "\n", false);
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{"metrics.web_config"});
  const std::string third = ep.url("http");
  EXPECT_EQ(curl_get(third, {"--user", "prometheus:old"}).status, 401);
  EXPECT_EQ(curl_get(third, {"--user", "prometheus:new"}).status, 200);

  // The address the endpoint holds, named by its port: handed over.
  const std::string bound = ep.ex->listen_address();
  next.listen = bound;
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{"metrics.listen"});
  EXPECT_EQ(ep.ex->listen_address(), bound);
  EXPECT_EQ(curl_get(third, {"--user", "prometheus:new"}).status, 200);

  // The probes on, then off again.
  next.health_listen = "127.0.0.1:0";
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{"metrics.health_listen"});
  ASSERT_NE(ep.ex->health_address(), "");
  EXPECT_EQ(curl_get("http://" + ep.ex->health_address() + "/livez").status, 200);
  next.health_listen = "";
  EXPECT_EQ(ep.ex->reconfigure(next), std::vector<std::string>{"metrics.health_listen"});
  EXPECT_EQ(ep.ex->health_address(), "");

  // Refused, the endpoint as it was: a file that does not load, an
  // address that is not local. The per-QP settings apply either way.
  ExporterOptions bad = next;
  bad.web_config = tmp_.path() + "/missing.yml";
  EXPECT_THROW(ep.ex->reconfigure(bad), Error);
  bad = next;
  bad.listen = "192.0.2.1:9";
  bad.per_qp = true;
  try {
    ep.ex->reconfigure(bad);
    ADD_FAILURE() << "an address that is not local was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.1:9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("applied before it: metrics.per_qp"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ep.ex->serving());
  EXPECT_EQ(ep.ex->listen_address(), bound);
  EXPECT_EQ(curl_get(third, {"--user", "prometheus:new"}).status, 200);
}

TEST(Gzip, OnlyForClientsThatAcceptIt) {
  Endpoint ep("");
  CurlReply plain = curl_get(ep.url("http"));
  ASSERT_EQ(plain.status, 200) << plain.error;
  EXPECT_EQ(plain.headers.find("Content-Encoding"), std::string::npos) << plain.headers;

  CurlReply gz = curl_get(ep.url("http"), {"--compressed"});
  ASSERT_EQ(gz.status, 200) << gz.error;
  EXPECT_NE(gz.headers.find("Content-Encoding: gzip"), std::string::npos) << gz.headers;
  const CommandResult check = promtool_check_metrics(gz.body);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  std::set<std::string> plain_names, gz_names;
  for (const auto& s : parse_exposition(plain.body)) plain_names.insert(s.name);
  for (const auto& s : parse_exposition(gz.body)) gz_names.insert(s.name);
  EXPECT_EQ(gz_names, plain_names);

  // The bytes on the wire are gzip's: without --compressed curl hands them over as they came.
  CurlReply raw = curl_get(ep.url("http"), {"-H", "Accept-Encoding: gzip"});
  ASSERT_EQ(raw.status, 200);
  ASSERT_GE(raw.body.size(), 2u);
  EXPECT_EQ(raw.body.substr(0, 2), "\x1f\x8b") << "not a gzip stream";
  EXPECT_EQ(curl_get(ep.url("http"), {"-H", "Accept-Encoding: gzip;q=0, identity"}).headers.find("Content-Encoding"),
            std::string::npos);
}

TEST(Gzip, AcceptEncodingValues) {
  for (const char* yes : {"gzip", "GZIP", "deflate, gzip", "gzip;q=0.5", "br;q=1.0, gzip ; q=0.1", " gzip "})
    EXPECT_TRUE(accepts_gzip(yes)) << yes;
  for (const char* no : {"", "identity", "deflate, br", "gzip;q=0", "gzip; q=0.000", "x-gzip", "gzipx", "*"})
    EXPECT_FALSE(accepts_gzip(no)) << no;
}

}  // namespace
}  // namespace rg::test
