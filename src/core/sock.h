/* sock.h - TCP helpers for the bootstrap (and any later socket user):
 * address parsing and printing, interface choice, listening, connecting with
 * retry, and sends/receives that never block past a deadline.
 *
 * Error reporting: the functions that return loomResult_t log their failure
 * once (err_set_sub under SUB_BOOTSTRAP, naming the address and errno). The
 * raw transfer functions (sock_send_all, sock_recv_all) return an errno value
 * instead, because only their caller knows which peer and message it was; it
 * logs with sock_err_str(). */
#ifndef LOOM_CORE_SOCK_H
#define LOOM_CORE_SOCK_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

#include "core/util.h"
#include "loom.h"

struct loom_comm;

union sock_addr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
  struct sockaddr_storage ss;
};

/* Large enough for "[ffff:...:ffff%ifname]:65535". */
#define SOCK_ADDR_STRLEN 96

/* Our own errno-like value for an orderly close by the peer (recv returned 0). */
#define SOCK_EOF (-1)

/* Parses "host:port", "[v6addr]:port" or "v4addr:port" (getaddrinfo, IPv4 or
 * IPv6). The port must be 1..65535. Logs and returns loomInvalidArgument on
 * bad text or an unresolvable host. Blocks only in name resolution. */
loomResult_t sock_addr_parse(const char* hostport, union sock_addr* addr_out);
/* The syntax of host:port and [ipv6]:port, without resolving: 0 with the host (NUL-terminated,
 * at most host_len - 1 bytes), the port (1..65535) and whether the host was bracketed; -1 when
 * text is not such an address. Pure (the fuzz harness calls it on outside input). */
int sock_hostport_split(const char* text, char* host, size_t host_len, int* port_out,
                        int* bracketed_out);
/* The length to pass to bind/connect for this address's family. */
socklen_t sock_addr_len(const union sock_addr* addr);
/* "10.0.0.1:29500" or "[fd00::2]:29500"; returns buf. Never fails. */
const char* sock_addr_str(const union sock_addr* addr, char* buf, size_t len);

/* 1 if ifname is selected by spec in NCCL_SOCKET_IFNAME's syntax: a comma
 * list of name prefixes; a leading '^' turns it into an exclusion list; a
 * leading '=' (after any '^') makes the names exact. NULL or "" selects all.
 * Pure. */
int sock_ifname_match(const char* spec, const char* ifname);
/* Picks the local address to listen on: the first UP interface selected by
 * LOOM_SOCKET_IFNAME; without it, the first UP non-loopback interface whose
 * name does not start with "docker" or "virbr", else loopback. IPv6
 * link-local addresses are skipped. The port is 0. */
loomResult_t sock_if_pick(union sock_addr* addr_out, char* ifname_out, size_t ifname_len);

/* Opens a non-blocking listening socket on *addr (port 0: any free port;
 * SO_REUSEADDR so a fixed port can be reused at once) and writes the bound
 * port back into *addr. comm may be NULL. */
loomResult_t sock_listen(struct loom_comm* comm, union sock_addr* addr, int* fd_out);
/* Connects to addr, retrying with backoff while the other side is not
 * listening yet (ECONNREFUSED and friends are normal during a rendezvous),
 * until the deadline: loomTimeout then. Gives up with loomInvalidUsage when
 * *abort_flag (may be NULL) turns nonzero. The socket returned is
 * non-blocking, with TCP_NODELAY. what names the peer for messages. */
loomResult_t sock_connect(struct loom_comm* comm, const union sock_addr* addr, const char* what,
                          const struct deadline* dl, const _Atomic int* abort_flag, int* fd_out);

/* A caller's own reason to give up a wait: fn(arg) != 0, asked before
 * each slice (at most 100 ms apart) of every wait. fn NULL: none. */
struct sock_stop {
  int (*fn)(void* arg);
  void* arg;
};

/* Sends or receives exactly len bytes on a non-blocking socket, waiting with
 * poll in slices of at most 100 ms. Returns 0, or: ETIMEDOUT when the
 * deadline passed, ECANCELED when *abort_flag (may be NULL) turned nonzero,
 * SOCK_EOF when the peer closed (recv), or the errno of the failed call.
 * Retries EINTR; never raises SIGPIPE; never blocks past the deadline. Logs
 * nothing. */
int sock_send_all(int fd, const void* buf, size_t len, const struct deadline* dl,
                  const _Atomic int* abort_flag);
int sock_recv_all(int fd, void* buf, size_t len, const struct deadline* dl,
                  const _Atomic int* abort_flag);
/* As sock_send_all and sock_recv_all, with a stop (may be NULL) instead of
 * an abort flag: ECANCELED once it says so. */
int sock_send_until(int fd, const void* buf, size_t len, const struct deadline* dl,
                    const struct sock_stop* stop);
int sock_recv_until(int fd, void* buf, size_t len, const struct deadline* dl,
                    const struct sock_stop* stop);
/* One connection attempt (no retry), waiting for it until the deadline or
 * the stop (may be NULL). Returns 0 with a non-blocking TCP_NODELAY socket
 * in *fd_out, or an errno value (ETIMEDOUT, ECANCELED). Logs nothing. */
int sock_connect_try(const union sock_addr* addr, const struct deadline* dl,
                     const struct sock_stop* stop, int* fd_out);
/* One attempt to send without waiting (best effort, e.g. a goodbye). Returns
 * 1 when every byte went out. */
int sock_send_nowait(int fd, const void* buf, size_t len);
/* Text for a value returned by the functions above. */
const char* sock_err_str(int err);

/* Backoff between connection attempts to a listener that is not up yet. */
#define SOCK_BACKOFF_FIRST_MS 10
#define SOCK_BACKOFF_MAX_MS 500
/* 1 for the connect() errors that mean "the listener is not there yet" or a
 * transient path problem: worth another try until the deadline. Pure. */
int sock_connect_retryable(int err);

/* shutdown() then close(); ignores errors (the peer may be gone). */
void sock_close(int fd);

#endif
