// The one QP ranking that `stats --qp` and the exporter's top-QP series both
// use: worst first (retransmits + estimated losses), then more traffic, then
// the key, so equal QPs are picked the same way by every reader, every time.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "metrics/presentation.h"

namespace rg::test {
namespace {

QpRow qp(const char* src, uint32_t dest_qp, uint64_t retransmits, uint64_t lost, uint64_t packets) {
  QpRow r;
  r.key.family = AF_INET;
  inet_pton(AF_INET, src, r.key.src);
  inet_pton(AF_INET, "198.51.100.1", r.key.dst);
  r.key.dest_qp = dest_qp;
  r.state.dir[RG_DIR_EGRESS].retransmits = retransmits;
  r.state.dir[RG_DIR_INGRESS].lost = lost;
  r.state.dir[RG_DIR_EGRESS].packets = packets;
  return r;
}

std::vector<std::string> names(const std::vector<QpRow>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(address_text(r.key.family, r.key.src) + "#" + std::to_string(r.key.dest_qp));
  return out;
}

// Five QPs, each rule deciding at least one pair: badness 5 > 2; among
// badness 2, 10 packets > 3; among the zero-badness one-packet QPs, the
// smaller source address.
std::vector<QpRow> five_qps() {
  return {qp("192.0.2.9", 1, 1, 1, 3), qp("192.0.2.2", 2, 0, 0, 1), qp("192.0.2.5", 3, 3, 2, 1),
          qp("192.0.2.1", 4, 0, 0, 1), qp("192.0.2.7", 5, 2, 0, 10)};
}

TEST(QpRanking, WorstFirstThenTrafficThenKey) {
  auto rows = five_qps();
  keep_worst_qps(rows, rows.size());
  EXPECT_EQ(names(rows), (std::vector<std::string>{"192.0.2.5#3", "192.0.2.7#5", "192.0.2.9#1", "192.0.2.1#4",
                                                   "192.0.2.2#2"}));
}

TEST(QpRanking, SameSelectionWhateverTheOrderTheMapIsReadIn) {
  auto base = five_qps();
  std::vector<size_t> order{0, 1, 2, 3, 4};
  auto expected = base;
  keep_worst_qps(expected, 4);
  size_t permutations = 0;
  do {
    std::vector<QpRow> rows;
    for (size_t i : order) rows.push_back(base[i]);
    keep_worst_qps(rows, 4);
    EXPECT_EQ(names(rows), names(expected));
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 120u);
}

TEST(QpRanking, TopLargerThanTheMapKeepsEveryQp) {
  auto rows = five_qps();
  keep_worst_qps(rows, 50);
  EXPECT_EQ(rows.size(), 5u);
}

TEST(QpFields, JsonHasEveryFieldAndExportsAllButThePsn) {
  rg_qp_dir d{};
  d.packets = 1;
  d.nak_seq_err = 2;
  d.max_psn = 77;
  const auto j = qp_dir_json(d);
  EXPECT_EQ(j.size(), qp_fields().size());
  EXPECT_EQ(j["packets"], 1);
  EXPECT_EQ(j["nak_seq_err"], 2);
  EXPECT_EQ(j["max_psn"], 77);
  for (const auto& f : qp_fields())
    EXPECT_EQ(f.metric.empty(), f.name == "max_psn") << f.name;
}

}  // namespace
}  // namespace rg::test
