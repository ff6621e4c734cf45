/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The environment contract between `roceguard nic env`, which writes the NIC
 * profile as KEY=VALUE lines (systemd EnvironmentFile syntax), and
 * libroceguard_qp.so, which reads the same keys from its environment or from
 * the file named by RG_ENV_PROFILE and applies them in ibv_modify_qp().
 * Plain C so the preload library can include it; values are decimal text.
 */
#ifndef ROCEGUARD_NIC_ENV_H
#define ROCEGUARD_NIC_ENV_H

/*
 * GRH traffic class, applied on the transition to RTR: the whole ToS byte,
 * DSCP << 2 | ECN (RoCE v2 carries the GRH traffic class in the IP header's
 * DSCP/ECN bits, IBA annex A17), so DSCP 46 with ECN 0 is 184.
 */
#define RG_ENV_TC "ROCEGUARD_TC"
#define RG_ENV_TC_MIN 0
#define RG_ENV_TC_MAX 255

/*
 * Local ACK timeout exponent t, applied on the transition to RTS: the
 * requester waits 4.096 us * 2^t (IBA local ACK timeout). 0 means "infinite" to the
 * device, which a profile never asks for.
 */
#define RG_ENV_TIMEOUT "ROCEGUARD_TIMEOUT"
#define RG_ENV_TIMEOUT_MIN 1
#define RG_ENV_TIMEOUT_MAX 31

/* Transport retry count, applied on the transition to RTS: a 3-bit field. */
#define RG_ENV_RETRY_CNT "ROCEGUARD_RETRY_CNT"
#define RG_ENV_RETRY_CNT_MIN 0
#define RG_ENV_RETRY_CNT_MAX 7

/*
 * Read by the preload library only: a file written by `roceguard nic env`
 * holding the keys above (variables set in the environment win over it),
 * and "1" to log every change on stderr.
 */
#define RG_ENV_PROFILE "ROCEGUARD_PROFILE"
#define RG_ENV_QP_DEBUG "ROCEGUARD_QP_DEBUG"

#endif /* ROCEGUARD_NIC_ENV_H */
