// RoCE v2 transport headers for userspace (IBA chapter 9): the one BTH
// encoder/decoder of the generator, the test packet builder and the
// benchmarks. Constants shared with the BPF programs come from roceguard.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "roceguard/roceguard.h"

namespace rg::wire {

inline constexpr uint16_t kRoceV2Port = RG_ROCE_UDP_PORT;
inline constexpr size_t kBthLen = 12;
inline constexpr size_t kAethLen = 4;
inline constexpr size_t kRethLen = 16;
inline constexpr size_t kIcrcLen = 4;
inline constexpr uint32_t kPsnMask = RG_PSN_MASK;

// BTH opcodes (IBA 9.2, Table 45; RC transport unless noted).
inline constexpr uint8_t kOpSendOnly = 0x04;
inline constexpr uint8_t kOpWriteOnly = 0x0a;
inline constexpr uint8_t kOpReadRequest = RG_BTH_OPCODE_READ_REQUEST;
inline constexpr uint8_t kOpReadResponseOnly = 0x10;
inline constexpr uint8_t kOpAck = RG_BTH_OPCODE_ACK;
inline constexpr uint8_t kOpUcSendOnly = 0x24;
inline constexpr uint8_t kOpUcWriteOnly = 0x2a;
inline constexpr uint8_t kOpCnp = RG_BTH_OPCODE_CNP;

// AETH syndromes (IBA 9.3.5): the top three bits say ACK / RNR NAK / NAK.
inline constexpr uint8_t kAethKindMask = RG_AETH_SYNDROME_KIND_MASK;
inline constexpr uint8_t kAethKindAck = RG_AETH_KIND_ACK;
inline constexpr uint8_t kSynAck = 0x1f;          // ACK, credit count "invalid" (as rxe sends)
inline constexpr uint8_t kSynRnrNak = 0x20 | 14;  // RNR NAK, timer field 14
inline constexpr uint8_t kSynNakSeqErr = RG_AETH_NAK_PSN_SEQ_ERR;
inline constexpr uint8_t kSynNakRemoteAccess = 0x62;

struct Bth {
  uint8_t opcode = kOpSendOnly;
  bool solicited = false;
  bool mig_req = false;
  uint8_t pad = 0;
  uint16_t pkey = 0xffff;
  uint8_t resv8a = 0;  // FECN/BECN and reserved bits: masked in the ICRC
  uint32_t dest_qp = 0x000011;
  bool ack_req = false;
  uint32_t psn = 0;
};

inline void put_bth(uint8_t* p, const Bth& b) {
  p[0] = b.opcode;
  p[1] = static_cast<uint8_t>((b.solicited << 7) | (b.mig_req << 6) | ((b.pad & 3) << 4));
  p[2] = static_cast<uint8_t>(b.pkey >> 8);
  p[3] = static_cast<uint8_t>(b.pkey);
  p[4] = b.resv8a;
  p[5] = static_cast<uint8_t>(b.dest_qp >> 16);
  p[6] = static_cast<uint8_t>(b.dest_qp >> 8);
  p[7] = static_cast<uint8_t>(b.dest_qp);
  p[8] = b.ack_req ? 0x80 : 0;
  p[9] = static_cast<uint8_t>(b.psn >> 16);
  p[10] = static_cast<uint8_t>(b.psn >> 8);
  p[11] = static_cast<uint8_t>(b.psn);
}

inline Bth get_bth(const uint8_t* p) {
  Bth b;
  b.opcode = p[0];
  b.solicited = p[1] & 0x80;
  b.mig_req = p[1] & 0x40;
  b.pad = (p[1] >> 4) & 3;
  b.pkey = static_cast<uint16_t>((p[2] << 8) | p[3]);
  b.resv8a = p[4];
  b.dest_qp = (uint32_t{p[5]} << 16) | (uint32_t{p[6]} << 8) | p[7];
  b.ack_req = p[8] & 0x80;
  b.psn = (uint32_t{p[9]} << 16) | (uint32_t{p[10]} << 8) | p[11];
  return b;
}

}  // namespace rg::wire
