// Valid frames for the fuzzers, made with the project's packet builder: the
// seed corpus, and the raw material of the structure-aware mutator (a valid
// Ethernet/IP/UDP/BTH or Geneve frame with at most one field broken).
#pragma once

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "packet.h"

namespace rg::fuzz {

using test::Bytes;

enum class Target { kTcEgress, kXdpIngress };

// Frames larger than this are not fed to the programs: BPF_PROG_TEST_RUN
// takes a single page, and the encapsulated frame must fit one too.
inline constexpr size_t kMaxFrame = 2048;

// A valid frame of the kinds the target classifies: RoCE v2 (any opcode,
// VLAN tags, IPv4 options, both families, towards tunnel routes or not) and,
// for ingress, Geneve from known and unknown peers around such a frame.
Bytes random_frame(std::mt19937& rng, Target target);

// Breaks one field of a valid frame (or truncates it): the mutation that
// reaches the parser's every exit without drowning in random noise.
void break_one_field(std::mt19937& rng, Bytes& frame);

// Named seeds: the cases the packet tests table exercises, per target.
std::vector<std::pair<std::string, Bytes>> seed_frames(Target target);

}  // namespace rg::fuzz
