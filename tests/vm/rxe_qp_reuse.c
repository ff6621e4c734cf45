/*
 * rxe-qp-reuse: one RC stream of SENDs between two hosts, whose responder
 * can insist on a given QP number and whose requester chooses its first PSN,
 * so that a test can make a new QP appear on the wire under the number of
 * one that was destroyed, with a PSN of its choosing.
 *
 * rxe hands out QP numbers cyclically from its pool (xa_alloc_cyclic over
 * [RXE_MIN_QP_INDEX, RXE_MAX_QP_INDEX]), so a number comes back only after
 * the pool has wrapped: with -q the responder creates and destroys QPs until
 * it is given that number (at most -t seconds), and reports how many it took;
 * the requester retries its connection for as long (default 300 s).
 *
 *   responder: rxe-qp-reuse -d DEV -x GID_INDEX -l [-q QPN] [-p PORT] [-n MSGS]
 *   requester: rxe-qp-reuse -d DEV -x GID_INDEX -c ADDRESS -P PSN [-t SECONDS] [-p PORT] [-n MSGS]
 *
 * Each message is one 1024-byte SEND, one packet at a path MTU of 1024. The
 * requester keeps at most 16 outstanding. Completions are waited for on a
 * completion channel (a busy poll would starve rxe on a one-vCPU guest).
 * Prints key=value lines: qpn, psn (first PSN this side sends), remote_qpn,
 * remote_psn, messages, and on the responder with -q cycles (QPs created to
 * reach the number), cycle_ms and max_qpn_seen.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_SIZE 1024
#define MAX_MSGS 4096
#define WINDOW 16
#define IO_TIMEOUT_MS 30000

struct wire_info {
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
};

static void die(const char *what)
{
	fprintf(stderr, "rxe-qp-reuse: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
	exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void io_all(int fd, void *buf, size_t len, int out)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = {.fd = fd, .events = out ? POLLOUT : POLLIN};
		ssize_t n;

		if (poll(&pfd, 1, IO_TIMEOUT_MS) != 1)
			die("TCP exchange timed out");
		n = out ? write(fd, p, len) : read(fd, p, len);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			die("TCP exchange");
		}
		p += n;
		len -= (size_t)n;
	}
}

static int tcp_listen_accept(int port)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_ANY_INIT};
	struct pollfd pfd;
	int one = 1, fd, c;

	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1))
		die("bind/listen");
	pfd.fd = fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 120000) != 1)
		die("no requester connected within 120 s");
	c = accept(fd, NULL, NULL);
	if (c < 0)
		die("accept");
	close(fd);
	return c;
}

/* Connects, retrying for up to max_seconds while the responder is not listening yet. */
static int tcp_connect(const char *host, int port, long max_seconds)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	char ports[16];
	int i, fd;

	snprintf(ports, sizeof(ports), "%d", port);
	if (getaddrinfo(host, ports, &hints, &ai))
		die("getaddrinfo");
	for (i = 0; i < max_seconds * 2; i++) {
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			return fd;
		}
		close(fd);
		usleep(500000);
	}
	die("responder never listened");
	return -1;
}

static void wait_cq(struct ibv_comp_channel *ch, struct ibv_cq *cq, int want, uint64_t *done)
{
	struct ibv_wc wc[WINDOW];
	int got = 0, n, i;

	while (got < want) {
		n = ibv_poll_cq(cq, WINDOW, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				errno = 0;
				fprintf(stderr, "rxe-qp-reuse: completion %s (wr %llu)\n",
					ibv_wc_status_str(wc[i].status), (unsigned long long)wc[i].wr_id);
				exit(1);
			}
		}
		got += n;
		*done += (uint64_t)n;
		if (got >= want)
			break;
		if (n == 0) {
			struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
			struct ibv_cq *ev_cq;
			void *ctx;

			if (ibv_req_notify_cq(cq, 0))
				die("ibv_req_notify_cq");
			/* A completion may have arrived before the request. */
			n = ibv_poll_cq(cq, WINDOW, wc);
			if (n < 0)
				die("ibv_poll_cq");
			for (i = 0; i < n; i++)
				if (wc[i].status != IBV_WC_SUCCESS) {
					errno = 0;
					fprintf(stderr, "rxe-qp-reuse: completion %s\n", ibv_wc_status_str(wc[i].status));
					exit(1);
				}
			got += n;
			*done += (uint64_t)n;
			if (n)
				continue;
			if (poll(&pfd, 1, IO_TIMEOUT_MS) != 1) {
				errno = 0;
				die("no completion within 30 s");
			}
			if (ibv_get_cq_event(ch, &ev_cq, &ctx))
				die("ibv_get_cq_event");
			ibv_ack_cq_events(ev_cq, 1);
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: rxe-qp-reuse -d DEV -x GID_INDEX (-l [-q QPN] | -c ADDRESS -P PSN) [-t SECONDS]"
			" [-p PORT] [-n MESSAGES]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dev_name = NULL, *peer = NULL;
	int gidx = -1, port = 18600, listen_mode = 0, opt, i, fd;
	long msgs = 200, want_qpn = -1, psn = -1, max_seconds = 300;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp = NULL;
	struct ibv_qp_init_attr init = {0};
	struct ibv_qp_attr attr;
	struct wire_info self = {0}, remote;
	union ibv_gid gid;
	uint64_t cycles = 0, done = 0, posted = 0;
	uint32_t max_seen = 0;
	double cycle_ms = 0;
	char *buf;

	while ((opt = getopt(argc, argv, "d:x:lc:q:P:p:n:t:")) != -1) {
		switch (opt) {
		case 'd': dev_name = optarg; break;
		case 'x': gidx = atoi(optarg); break;
		case 'l': listen_mode = 1; break;
		case 'c': peer = optarg; break;
		case 'q': want_qpn = strtol(optarg, NULL, 0); break;
		case 'P': psn = strtol(optarg, NULL, 0); break;
		case 'p': port = atoi(optarg); break;
		case 'n': msgs = strtol(optarg, NULL, 0); break;
		case 't': max_seconds = strtol(optarg, NULL, 0); break;
		default: usage();
		}
	}
	if (!dev_name || gidx < 0 || listen_mode == !!peer || msgs < 1 || msgs > MAX_MSGS ||
	    (peer && (psn < 0 || psn > 0xffffff)) || (want_qpn >= 0 && !listen_mode) ||
	    max_seconds < 1 || max_seconds > 600)
		usage();

	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("no such RDMA device");
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, MSG_SIZE);
	if (!pd || !buf)
		die("ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, MSG_SIZE, IBV_ACCESS_LOCAL_WRITE);
	ch = ibv_create_comp_channel(ctx);
	if (!mr || !ch)
		die("ibv_reg_mr/ibv_create_comp_channel");
	cq = ibv_create_cq(ctx, (int)msgs + WINDOW, NULL, ch, 0);
	if (!cq)
		die("ibv_create_cq");

	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = WINDOW;
	init.cap.max_recv_wr = listen_mode ? (uint32_t)msgs : 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;

	/* Until the pool hands out the number asked for (bounded in count and time). */
	if (want_qpn >= 0) {
		double start = now_ms(), deadline = start + max_seconds * 1e3;

		for (;;) {
			qp = ibv_create_qp(pd, &init);
			if (!qp)
				die("ibv_create_qp");
			if (qp->qp_num > max_seen)
				max_seen = qp->qp_num;
			if (qp->qp_num == (uint32_t)want_qpn)
				break;
			if (ibv_destroy_qp(qp))
				die("ibv_destroy_qp");
			qp = NULL;
			if (++cycles > (1u << 24) || ((cycles & 1023) == 0 && now_ms() > deadline)) {
				errno = 0;
				fprintf(stderr, "rxe-qp-reuse: QP number %ld not handed out after %llu QPs\n", want_qpn,
					(unsigned long long)cycles);
				return 1;
			}
		}
		cycle_ms = now_ms() - start;
		fprintf(stderr, "rxe-qp-reuse: QP number %ld again after %llu QPs, %.0f ms\n", want_qpn,
			(unsigned long long)cycles, cycle_ms);
	} else {
		qp = ibv_create_qp(pd, &init);
		if (!qp)
			die("ibv_create_qp");
	}

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = 0;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	if (listen_mode) {
		for (i = 0; i < msgs; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = MSG_SIZE, .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;

			if (ibv_post_recv(qp, &wr, &bad))
				die("ibv_post_recv");
		}
	}

	self.qpn = htonl(qp->qp_num);
	self.psn = htonl(listen_mode ? 0 : (uint32_t)psn);
	memcpy(self.gid, gid.raw, 16);
	fd = listen_mode ? tcp_listen_accept(port) : tcp_connect(peer, port, max_seconds);
	io_all(fd, &self, sizeof(self), 1);
	io_all(fd, &remote, sizeof(remote), 0);
	remote.qpn = ntohl(remote.qpn);
	remote.psn = ntohl(remote.psn);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = IBV_MTU_1024;
	attr.dest_qp_num = remote.qpn;
	attr.rq_psn = remote.psn;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1;
	memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, 16);
	attr.ah_attr.grh.sgid_index = (uint8_t)gidx;
	attr.ah_attr.grh.hop_limit = 64;
	attr.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = ntohl(self.psn);
	attr.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");

	if (listen_mode) {
		char c = 'r';

		/* Receives are posted and the QP is ready: the requester may send. */
		io_all(fd, &c, 1, 1);
		wait_cq(ch, cq, (int)msgs, &done);
		io_all(fd, &c, 1, 0);
	} else {
		char c;

		io_all(fd, &c, 1, 0);
		while (done < (uint64_t)msgs) {
			while (posted < (uint64_t)msgs && posted - done < WINDOW) {
				struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = MSG_SIZE, .lkey = mr->lkey};
				struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
							 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
						   *bad;

				if (ibv_post_send(qp, &wr, &bad))
					die("ibv_post_send");
				posted++;
			}
			wait_cq(ch, cq, 1, &done);
		}
		io_all(fd, &c, 1, 1);
	}
	close(fd);

	printf("qpn=%u\npsn=%u\nremote_qpn=%u\nremote_psn=%u\nmessages=%llu\n", qp->qp_num, ntohl(self.psn),
	       remote.qpn, remote.psn, (unsigned long long)done);
	if (want_qpn >= 0)
		printf("cycles=%llu\ncycle_ms=%.0f\nmax_qpn_seen=%u\n", (unsigned long long)cycles, cycle_ms, max_seen);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	return 0;
}
