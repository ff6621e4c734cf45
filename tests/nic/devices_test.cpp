// What `nic show` prints of a device: names are bytes (a netdev may be
// renamed to anything but NUL, '/' and whitespace), JSON and the text view
// carry text, so a name that is not UTF-8 shows as printable() writes it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nic/devices.h"

namespace {

using namespace rg::nic;

std::vector<DeviceInfo> device_on(const std::string& netdev) {
  GidEntry g;
  g.index = 1;
  g.gid = "::ffff:192.0.2.1";
  g.type = "RoCE v2";
  g.netdev = netdev;
  g.address = "192.0.2.1";
  PortInfo p;
  p.num = 1;
  p.state = "ACTIVE";
  p.link_layer = "Ethernet";
  p.active_mtu = 1024;
  p.netdev = netdev;
  p.gids = {g};
  DeviceInfo d;
  d.name = "rxe\xff";
  d.driver = "rxe";
  d.node_guid = "0000:0000:0000:0001";
  d.ports = {p};
  return {d};
}

TEST(NicDevices, NamesThatAreNotTextShowEscapedInJsonAndText) {
  const auto devices = device_on("a0\xff" "x");
  std::string dumped;
  ASSERT_NO_THROW(dumped = to_json(devices).dump()) << "nlohmann refuses bytes that are not UTF-8";
  const nlohmann::json j = nlohmann::json::parse(dumped);
  const nlohmann::json& d = j["devices"][0];
  EXPECT_EQ(d["name"], "rxe\\xff");
  EXPECT_EQ(d["ports"][0]["netdev"], "a0\\xffx");
  EXPECT_EQ(d["ports"][0]["gids"][0]["netdev"], "a0\\xffx");
  std::string text;
  for (const auto& line : to_text(devices)) text += line + "\n";
  EXPECT_NE(text.find("rxe\\xff  driver rxe"), std::string::npos) << text;
  EXPECT_NE(text.find("netdev a0\\xffx"), std::string::npos) << text;
  EXPECT_EQ(text.find('\xff'), std::string::npos) << "no raw byte reaches the terminal";
}

TEST(NicDevices, TextNamesShowAsTheyAre) {
  const auto j = to_json(device_on("wan0"));
  EXPECT_EQ(j["devices"][0]["ports"][0]["netdev"], "wan0");
  EXPECT_EQ(j["devices"][0]["ports"][0]["roce_v2_gid_index"]["192.0.2.1"], 1);
}

}  // namespace
