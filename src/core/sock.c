/* sock.c - TCP helpers: addresses, interfaces, listen, connect with retry,
 * and deadline-bound transfers on non-blocking sockets. */
#include "core/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/checks.h"
#include "core/comm.h"
#include "core/params.h"

/* Waits are cut into slices so that an abort flag is seen within this long. */
#define SOCK_SLICE_MS 100

/* ---- Addresses ------------------------------------------------------------ */

static int parse_port(const char* text, int* port_out) {
  if (*text == '\0' || strlen(text) > 5) return -1;
  int port = 0;
  for (const char* p = text; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535) return -1;
  *port_out = port;
  return 0;
}

/* Splits text into host and port text; brackets are required around IPv6
 * literals, since the last colon would be ambiguous otherwise. */
static int split_hostport(const char* text, char* host, size_t host_len, const char** port_out,
                          int* bracketed_out) {
  const char* host_start = text;
  const char* host_end;
  const char* colon;
  *bracketed_out = (text[0] == '[');
  if (*bracketed_out) {
    host_start = text + 1;
    host_end = strchr(host_start, ']');
    if (host_end == NULL || host_end[1] != ':') return -1;
    colon = host_end + 1;
  } else {
    colon = strrchr(text, ':');
    if (colon == NULL || memchr(text, ':', (size_t)(colon - text)) != NULL) return -1;
    host_end = colon;
  }
  size_t n = (size_t)(host_end - host_start);
  if (n == 0 || n >= host_len) return -1;
  memcpy(host, host_start, n);
  host[n] = '\0';
  *port_out = colon + 1;
  return 0;
}

int sock_hostport_split(const char* text, char* host, size_t host_len, int* port_out,
                        int* bracketed_out) {
  const char* port_text;
  if (split_hostport(text, host, host_len, &port_text, bracketed_out) != 0) return -1;
  return parse_port(port_text, port_out);
}

loomResult_t sock_addr_parse(const char* hostport, union sock_addr* addr_out) {
  char host[256];
  const char* port_text;
  int bracketed, port;
  if (hostport == NULL || hostport[0] == '\0')
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: empty address (expected host:port)");
  if (split_hostport(hostport, host, sizeof(host), &port_text, &bracketed) != 0)
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: address '%s' is not host:port or [ipv6]:port", hostport);
  if (parse_port(port_text, &port) != 0)
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: address '%s' has port '%s', expected 1..65535", hostport,
                       port_text);

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = bracketed ? AI_NUMERICHOST : 0;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL)
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: cannot resolve '%s' (from '%s'): %s", host, hostport,
                       rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  union sock_addr a;
  memset(&a, 0, sizeof(a));
  memcpy(&a, res->ai_addr, LOOM_MIN((size_t)res->ai_addrlen, sizeof(a)));
  freeaddrinfo(res);
  if (a.sa.sa_family == AF_INET)
    a.sin.sin_port = htons((uint16_t)port);
  else
    a.sin6.sin6_port = htons((uint16_t)port);
  *addr_out = a;
  return loomSuccess;
}

socklen_t sock_addr_len(const union sock_addr* addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char* sock_addr_str(const union sock_addr* addr, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%u", host, ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%u", host, ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, len, "(address family %d)", addr->sa.sa_family);
  }
  return buf;
}

/* ---- Interfaces ----------------------------------------------------------- */

int sock_ifname_match(const char* spec, const char* ifname) {
  if (spec == NULL || spec[0] == '\0') return 1;
  int exclude = 0, exact = 0, found = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  size_t name_len = strlen(ifname);
  for (const char* p = spec; *p != '\0' && !found;) {
    const char* comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n > 0 && strncmp(ifname, p, n) == 0 && (!exact || name_len == n)) found = 1;
    if (comma == NULL) break;
    p = comma + 1;
  }
  return exclude ? !found : found;
}

/* Link-local IPv6 addresses need a scope id that the id has no room for. */
static int addr_usable(const struct sockaddr* sa) {
  if (sa == NULL) return 0;
  if (sa->sa_family == AF_INET) return 1;
  if (sa->sa_family != AF_INET6) return 0;
  return !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6*)sa)->sin6_addr);
}

/* pass 0: the preferred interfaces; pass 1 (no spec only): loopback. */
static int if_wanted(const struct ifaddrs* ifa, const char* spec, int pass) {
  if (!(ifa->ifa_flags & IFF_UP) || !addr_usable(ifa->ifa_addr)) return 0;
  if (spec[0] != '\0') return sock_ifname_match(spec, ifa->ifa_name);
  int loop = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
  if (pass == 1) return loop;
  /* Container and VM bridges are rarely reachable from other hosts. */
  return !loop && strncmp(ifa->ifa_name, "docker", 6) != 0 &&
         strncmp(ifa->ifa_name, "virbr", 5) != 0;
}

loomResult_t sock_if_pick(union sock_addr* addr_out, char* ifname_out, size_t ifname_len) {
  const char* spec = params_get()->socket_ifname;
  if (spec == NULL) spec = "";
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0)
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomSystemError, "bootstrap: getifaddrs failed: %s",
                       strerror(errno));
  const struct ifaddrs* pick = NULL;
  for (int pass = 0; pass < (spec[0] ? 1 : 2) && pick == NULL; pass++)
    for (const struct ifaddrs* ifa = list; ifa != NULL && pick == NULL; ifa = ifa->ifa_next)
      if (if_wanted(ifa, spec, pass)) pick = ifa;
  if (pick == NULL) {
    freeifaddrs(list);
    return err_set_sub(NULL, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: no UP interface with an IPv4 or global IPv6 address%s%s%s",
                       spec[0] ? " matches LOOM_SOCKET_IFNAME='" : "", spec, spec[0] ? "'" : "");
  }
  union sock_addr a;
  memset(&a, 0, sizeof(a));
  memcpy(&a, pick->ifa_addr, pick->ifa_addr->sa_family == AF_INET ? sizeof(a.sin) : sizeof(a.sin6));
  *addr_out = a;
  snprintf(ifname_out, ifname_len, "%s", pick->ifa_name);
  freeifaddrs(list);
  return loomSuccess;
}

/* ---- Listen and connect --------------------------------------------------- */

static int sock_open(int family) {
  return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

/* Binds fd to addr; when the address is not local (a launcher's MASTER_ADDR
 * seen through NAT, say) falls back to the wildcard of the same family. */
static int bind_or_wildcard(int fd, union sock_addr* addr) {
  if (bind(fd, &addr->sa, sock_addr_len(addr)) == 0) return 0;
  if (errno != EADDRNOTAVAIL) return -1;
  char text[SOCK_ADDR_STRLEN];
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: %s is not a local address, listening on all interfaces",
            sock_addr_str(addr, text, sizeof(text)));
  if (addr->sa.sa_family == AF_INET)
    addr->sin.sin_addr.s_addr = htonl(INADDR_ANY);
  else
    addr->sin6.sin6_addr = in6addr_any;
  return bind(fd, &addr->sa, sock_addr_len(addr));
}

loomResult_t sock_listen(struct loom_comm* comm, union sock_addr* addr, int* fd_out) {
  char text[SOCK_ADDR_STRLEN];
  sock_addr_str(addr, text, sizeof(text));
  int fd = sock_open(addr->sa.sa_family);
  if (fd < 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: socket() for %s failed: %s", text, strerror(errno));
  int one = 1;
  const char* call = "setsockopt(SO_REUSEADDR)";
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) goto fail;
  call = "bind";
  if (bind_or_wildcard(fd, addr) != 0) goto fail;
  call = "listen";
  if (listen(fd, SOMAXCONN) != 0) goto fail;
  socklen_t len = sizeof(*addr);
  call = "getsockname";
  if (getsockname(fd, &addr->sa, &len) != 0) goto fail;
  *fd_out = fd;
  return loomSuccess;
fail:;
  int e = errno;
  close(fd);
  return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError, "bootstrap: %s on %s failed: %s", call,
                     text, strerror(e));
}

int sock_connect_retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == ECONNABORTED ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN || err == EINTR;
}

static int sock_wait(int fd, short events, const struct deadline* dl, const struct sock_stop* stop);

static int flag_set(void* flag) {
  return atomic_load((const _Atomic int*)flag) != 0;
}
/* The stop of an abort flag (NULL: none). */
static struct sock_stop flag_stop(const _Atomic int* abort_flag) {
  return (struct sock_stop){.fn = abort_flag ? flag_set : NULL, .arg = (void*)abort_flag};
}
static int stop_now(const struct sock_stop* stop) {
  return stop != NULL && stop->fn != NULL && stop->fn(stop->arg);
}

/* A NULL deadline means none. */
static int dl_passed(const struct deadline* dl) {
  return dl != NULL && deadline_passed(dl);
}
static long long dl_left_ms(const struct deadline* dl, long long cap) {
  return dl ? LOOM_MIN(deadline_left_ms(dl), cap) : cap;
}

int sock_connect_try(const union sock_addr* addr, const struct deadline* dl,
                     const struct sock_stop* stop, int* fd_out) {
  if (stop_now(stop)) return ECANCELED;
  int fd = sock_open(addr->sa.sa_family);
  if (fd < 0) return errno;
  int err = 0;
  if (connect(fd, &addr->sa, sock_addr_len(addr)) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      err = sock_wait(fd, POLLOUT, dl, stop);
      socklen_t len = sizeof(err);
      if (err == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  if (err != 0) {
    close(fd);
    return err;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* latency, not bandwidth */
  *fd_out = fd;
  return 0;
}

static void sleep_ms(long long ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

loomResult_t sock_connect(struct loom_comm* comm, const union sock_addr* addr, const char* what,
                          const struct deadline* dl, const _Atomic int* abort_flag, int* fd_out) {
  char text[SOCK_ADDR_STRLEN];
  sock_addr_str(addr, text, sizeof(text));
  uint64_t start = time_now_ns();
  long long backoff = SOCK_BACKOFF_FIRST_MS;
  int attempts = 0, last_err = 0;
  struct sock_stop stop = flag_stop(abort_flag);
  for (;;) {
    int err = sock_connect_try(addr, dl, &stop, fd_out);
    attempts++;
    if (err == 0) return loomSuccess;
    /* Our own deadline cutting an attempt short says less than what the
     * attempts before it met (refused, unreachable). */
    if (err != ETIMEDOUT || last_err == 0) last_err = err;
    if (err == ECANCELED)
      return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                         "bootstrap: %s while connecting to %s at %s", comm_stop_reason(comm), what,
                         text);
    if (!sock_connect_retryable(err))
      return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                         "bootstrap: connect to %s at %s failed: %s", what, text, strerror(err));
    if (dl_passed(dl))
      return err_set_sub(comm, SUB_BOOTSTRAP, loomTimeout,
                         "bootstrap: could not connect to %s at %s within %llu ms "
                         "(%d attempts, last error: %s)",
                         what, text, (unsigned long long)((time_now_ns() - start) / 1000000),
                         attempts, strerror(last_err));
    sleep_ms(dl_left_ms(dl, backoff));
    backoff = LOOM_MIN(backoff * 2, SOCK_BACKOFF_MAX_MS);
  }
}

/* ---- Transfers ------------------------------------------------------------ */

/* Waits until fd is ready for events, in slices, watching the deadline and
 * the abort flag. Returns 0 (ready, or an error the next call will report),
 * ETIMEDOUT, ECANCELED or errno. */
static int sock_wait(int fd, short events, const struct deadline* dl,
                     const struct sock_stop* stop) {
  for (;;) {
    if (stop_now(stop)) return ECANCELED;
    /* Poll before judging the deadline: what is ready at the deadline counts. */
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int rc = poll(&p, 1, (int)dl_left_ms(dl, SOCK_SLICE_MS));
    if (rc > 0) return 0;
    if (rc < 0 && errno != EINTR) return errno;
    if (dl_passed(dl)) return ETIMEDOUT;
  }
}

int sock_send_all(int fd, const void* buf, size_t len, const struct deadline* dl,
                  const _Atomic int* abort_flag) {
  struct sock_stop stop = flag_stop(abort_flag);
  return sock_send_until(fd, buf, len, dl, &stop);
}

int sock_recv_all(int fd, void* buf, size_t len, const struct deadline* dl,
                  const _Atomic int* abort_flag) {
  struct sock_stop stop = flag_stop(abort_flag);
  return sock_recv_until(fd, buf, len, dl, &stop);
}

int sock_send_until(int fd, const void* buf, size_t len, const struct deadline* dl,
                    const struct sock_stop* stop) {
  const char* p = (const char*)buf;
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int err = sock_wait(fd, POLLOUT, dl, stop);
    if (err != 0) return err;
  }
  return 0;
}

int sock_recv_until(int fd, void* buf, size_t len, const struct deadline* dl,
                    const struct sock_stop* stop) {
  char* p = (char*)buf;
  size_t off = 0;
  while (off < len) {
    ssize_t n = recv(fd, p + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n == 0) return SOCK_EOF;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int err = sock_wait(fd, POLLIN, dl, stop);
    if (err != 0) return err;
  }
  return 0;
}

int sock_send_nowait(int fd, const void* buf, size_t len) {
  ssize_t n;
  do {
    n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == (ssize_t)len;
}

const char* sock_err_str(int err) {
  switch (err) {
    case SOCK_EOF:
      return "connection closed by the peer";
    case ETIMEDOUT:
      return "timed out";
    case ECANCELED:
      return "communicator aborted";
    default:
      return strerror(err);
  }
}

void sock_close(int fd) {
  if (fd < 0) return;
  shutdown(fd, SHUT_RDWR);
  close(fd);
}
