// The endpoint's password check, seen from the bcrypt calls it makes:
// crypt_r is wrapped at link time (--wrap=crypt_r), so a case reads the
// setting each check spends its bcrypt on, not the time it took.
#include <gtest/gtest.h>

#include <crypt.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "metrics/web_config.h"

extern "C" char* __real_crypt_r(const char* phrase, const char* setting, crypt_data* data);

namespace {
std::vector<std::string> settings;  // every setting crypt_r was called with
}  // namespace

extern "C" char* __wrap_crypt_r(const char* phrase, const char* setting, crypt_data* data) {
  settings.emplace_back(setting);
  return __real_crypt_r(phrase, setting, data);
}

namespace rg {
namespace {

std::string hash_of(const std::string& password, unsigned long cost) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2b$", cost, nullptr, 0, salt, sizeof(salt))) throw std::runtime_error("crypt_gensalt_rn");
  crypt_data data{};
  const char* hash = __real_crypt_r(password.c_str(), salt, &data);
  if (!hash || hash[0] == '*') throw std::runtime_error("crypt_r");
  return hash;
}

// The cost field of a bcrypt setting or hash: "$2b$05$..." -> "05".
std::string cost_of(const std::string& setting) { return setting.substr(4, 2); }

// An unknown user's check spends a bcrypt of the configured users' cost
// (of the highest, when they differ), not a fixed one: bcrypt's time is its
// cost, and a fixed cost answers an unknown name faster or slower than a
// user's wrong password.
TEST(WebAuth, AnUnknownUserCostsWhatAConfiguredOneCosts) {
  for (const std::vector<unsigned long>& costs :
       std::vector<std::vector<unsigned long>>{{4}, {5}, {4, 6}, {6, 4}}) {
    WebConfig config;
    for (size_t i = 0; i < costs.size(); ++i) config.users["user" + std::to_string(i)] = hash_of("pw", costs[i]);
    char highest[3];
    std::snprintf(highest, sizeof(highest), "%02lu", *std::max_element(costs.begin(), costs.end()));
    SCOPED_TRACE(std::string("highest cost of the users ") + highest);

    settings.clear();
    EXPECT_FALSE(basic_auth_matches(config, "user0", "wrong"));
    ASSERT_EQ(settings.size(), 1u);
    EXPECT_EQ(settings[0], config.users.at("user0")) << "a user's own hash";

    settings.clear();
    EXPECT_FALSE(basic_auth_matches(config, "nobody", "pw"));
    ASSERT_EQ(settings.size(), 1u) << "one bcrypt, as for a user";
    EXPECT_EQ(settings[0].substr(0, 4), "$2b$");
    EXPECT_EQ(cost_of(settings[0]), highest);

    EXPECT_TRUE(basic_auth_matches(config, "user0", "pw"));
  }
}

}  // namespace
}  // namespace rg
