/* bootstrap.c - the wire format's checks, the peer table's layout and tree,
 * and the unique id. The listeners ids share are in boot_listen.c, the
 * rendezvous in boot_init.c, the table's way down the tree in boot_tree.c,
 * links and rank-to-rank messages in boot_link.c, the mailbox in
 * boot_mail.c, all-gather in boot_gather.c; the watcher and teardown in
 * boot_watch.c.
 *
 * Wire: every message is a struct boot_hdr (24 bytes, host byte order: both
 * ends run the same build, and a foreign byte order fails the magic check)
 * followed by hdr.length payload bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/boot_internal.h"
#include "core/checks.h"

_Static_assert(sizeof(struct boot_id) == LOOM_UNIQUE_ID_BYTES, "boot_id must fill loomUniqueId");
_Static_assert(sizeof(struct boot_hdr) == 24, "the wire header is 24 bytes");
_Static_assert(sizeof(struct boot_addr) == 24, "a link address is 24 bytes");
_Static_assert(sizeof(struct boot_link_hello) == 32, "a link hello is 32 bytes");

/* ---- Wire checks ------------------------------------------------------------ */

const char* boot_type_name(unsigned type) {
  static const char* const names[BOOT_TYPE_MAX] = {
      [BOOT_HELLO] = "hello", [BOOT_TABLE] = "table",     [BOOT_DATA] = "data",
      [BOOT_BYE] = "bye",     [BOOT_FAILED] = "failed",   [BOOT_REFUSED] = "refused",
      [BOOT_PING] = "ping",   [BOOT_LEFT] = "left",       [BOOT_WELCOME] = "welcome",
      [BOOT_LINK] = "link",   [BOOT_LINK_OK] = "link-ok", [BOOT_P2P] = "rank-to-rank"};
  return (type > 0 && type < BOOT_TYPE_MAX) ? names[type] : "unknown";
}

loomResult_t boot_hdr_check(const struct boot_hdr* h, uint32_t max_len, char* why_out,
                            size_t why_len) {
  if (h->magic != BOOT_MSG_MAGIC) {
    snprintf(why_out, why_len, "not a loom bootstrap message (magic 0x%08x)", h->magic);
    return loomRemoteError;
  }
  if (h->version != BOOT_WIRE_VERSION) {
    snprintf(why_out, why_len, "wire version %u, this build speaks %u", h->version,
             BOOT_WIRE_VERSION);
    return loomRemoteError;
  }
  if (h->type == 0 || h->type >= BOOT_TYPE_MAX) {
    snprintf(why_out, why_len, "unknown message type %u", h->type);
    return loomRemoteError;
  }
  uint32_t bound = LOOM_MIN(max_len, BOOT_MAX_PAYLOAD);
  if (h->length > bound) {
    snprintf(why_out, why_len, "%s message of %u bytes, more than the %u allowed here",
             boot_type_name(h->type), h->length, bound);
    return loomRemoteError;
  }
  return loomSuccess;
}

/* A stranger (short hello, wrong secret) gets loomRemoteError: rank 0 drops
 * it silently. A rank that knows the secret but is misconfigured gets
 * loomInvalidUsage: rank 0 tells it why. */
loomResult_t boot_hello_check(const struct boot_hello* h, size_t len, uint64_t secret, int nranks,
                              char* why_out, size_t why_len) {
  if (len < sizeof(*h)) {
    snprintf(why_out, why_len, "short hello (%zu bytes, expected %zu)", len, sizeof(*h));
    return loomRemoteError;
  }
  if (h->secret != secret) {
    snprintf(why_out, why_len, "wrong secret");
    return loomRemoteError;
  }
  if (h->nranks != nranks) {
    snprintf(why_out, why_len, "nranks mismatch: the rank says %d, rank 0 has %d", h->nranks,
             nranks);
    return loomInvalidUsage;
  }
  if (h->rank < 1 || h->rank >= nranks) {
    snprintf(why_out, why_len, "rank %d out of range 1..%d", h->rank, nranks - 1);
    return loomInvalidUsage;
  }
  /* Peers other than rank 0 dial it for links: the table must say where. */
  int fam = h->link.family;
  if (nranks > 2 && ((fam != AF_INET && fam != AF_INET6) || h->link.port == 0)) {
    snprintf(why_out, why_len, "rank %d gave no address for its links (family %d, port %u)",
             h->rank, fam, ntohs(h->link.port));
    return loomInvalidUsage;
  }
  return loomSuccess;
}

loomResult_t boot_link_hello_check(const struct boot_link_hello* h, size_t len, uint64_t secret,
                                   uint64_t comm_hash, int nranks, int self, char* why_out,
                                   size_t why_len) {
  if (len != sizeof(*h)) {
    snprintf(why_out, why_len, "link hello of %zu bytes, expected %zu", len, sizeof(*h));
    return loomRemoteError;
  }
  if (h->secret != secret) {
    snprintf(why_out, why_len, "wrong secret");
    return loomRemoteError;
  }
  if (h->comm_hash != comm_hash || h->nranks != nranks) {
    snprintf(why_out, why_len,
             "a link of another communicator (%d ranks, hash %016llx; here %d ranks, hash %016llx)",
             h->nranks, (unsigned long long)h->comm_hash, nranks, (unsigned long long)comm_hash);
    return loomInvalidUsage;
  }
  if (h->to != self) {
    snprintf(why_out, why_len, "a link meant for rank %d reached rank %d", h->to, self);
    return loomInvalidUsage;
  }
  /* Rank 0's links are the star: nobody dials it, and it dials nobody. */
  if (h->from < 1 || h->from >= nranks || h->from == self) {
    snprintf(why_out, why_len, "a link from rank %d, not a rank that may dial rank %d", h->from,
             self);
    return loomInvalidUsage;
  }
  return loomSuccess;
}

/* ---- The peer table and its tree --------------------------------------------- */

size_t boot_table_len(int nranks) {
  return sizeof(uint64_t) + (size_t)nranks * (sizeof(struct peer_info) + sizeof(struct boot_addr));
}

void boot_table_parse(const void* table, int nranks, uint64_t* hash_out,
                      struct peer_info* peers_out, struct boot_addr* addrs_out) {
  const uint8_t* p = table;
  size_t rows = (size_t)nranks * sizeof(struct peer_info);
  if (hash_out != NULL) memcpy(hash_out, p, sizeof(*hash_out));
  p += sizeof(uint64_t);
  if (peers_out != NULL) memcpy(peers_out, p, rows);
  p += rows;
  if (addrs_out != NULL) memcpy(addrs_out, p, (size_t)nranks * sizeof(struct boot_addr));
}

int boot_tree_parent(int rank) {
  if (rank <= 0) return -1;
  unsigned r = (unsigned)rank, high = 1u << (31 - __builtin_clz(r));
  return (int)(r - high);
}

/* The children r + 2^k (2^k > r) in increasing k: child r + 2^k heads the
 * ranks r + 2^k + (multiples of 2^(k+1)), so the first has the biggest
 * subtree and is served first. */
int boot_tree_children(int rank, int nranks, int* out, int cap) {
  int n = 0;
  long long step = 1;
  while (step <= rank) step <<= 1;
  for (; rank + step < nranks; step <<= 1) {
    if (n < cap) out[n] = rank + (int)step;
    n++;
  }
  return n;
}

void boot_addr_pack(const union sock_addr* a, struct boot_addr* out) {
  memset(out, 0, sizeof(*out));
  out->family = a->sa.sa_family;
  if (a->sa.sa_family == AF_INET6) {
    out->port = a->sin6.sin6_port;
    memcpy(out->addr, &a->sin6.sin6_addr, 16);
  } else {
    out->port = a->sin.sin_port;
    memcpy(out->addr, &a->sin.sin_addr, 4);
  }
}

void boot_addr_unpack(const struct boot_addr* a, union sock_addr* out) {
  memset(out, 0, sizeof(*out));
  if (a->family == AF_INET6) {
    out->sin6.sin6_family = AF_INET6;
    out->sin6.sin6_port = a->port;
    memcpy(&out->sin6.sin6_addr, a->addr, 16);
  } else if (a->family == AF_INET) {
    out->sin.sin_family = AF_INET;
    out->sin.sin_port = a->port;
    memcpy(&out->sin.sin_addr, a->addr, 4);
  }
}

void boot_hdr_fill(struct boot_hdr* h, int from, uint16_t type, uint32_t tag, uint32_t len) {
  memset(h, 0, sizeof(*h));
  h->magic = BOOT_MSG_MAGIC;
  h->type = type;
  h->version = BOOT_WIRE_VERSION;
  h->length = len;
  h->tag = tag;
  h->from = from;
}

/* The send lock is waited for no longer than the deadline either: its
 * holder may be stuck sending to a peer that stopped reading. (timedlock
 * takes CLOCK_REALTIME; clocklock would be immune to clock steps but the
 * thread sanitizer does not know it, and a step only stretches this bound.) */
int boot_link_lock(struct boot_link* l, const struct deadline* dl) {
  if (dl == NULL || dl->at_ns == 0) return pthread_mutex_lock(&l->send_lock);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ms = deadline_left_ms(dl);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  return pthread_mutex_timedlock(&l->send_lock, &ts);
}

int boot_link_send_locked(struct boot_link* l, int from, uint16_t type, uint32_t tag,
                          const void* payload, uint32_t len, const struct deadline* dl,
                          const struct sock_stop* stop) {
  struct boot_hdr h;
  boot_hdr_fill(&h, from, type, tag, len);
  int err = sock_send_until(l->fd, &h, sizeof(h), dl, stop);
  if (err == 0 && len > 0) err = sock_send_until(l->fd, payload, len, dl, stop);
  return err;
}

static int flag_raised(void* flag) {
  return atomic_load((const _Atomic int*)flag) != 0;
}

int boot_link_send(struct boot_link* l, int from, uint16_t type, uint32_t tag, const void* payload,
                   uint32_t len, const struct deadline* dl, const _Atomic int* abort_flag) {
  struct sock_stop stop = {.fn = abort_flag ? flag_raised : NULL, .arg = (void*)abort_flag};
  int rc = boot_link_lock(l, dl);
  if (rc != 0) return rc; /* ETIMEDOUT */
  int err = boot_link_send_locked(l, from, type, tag, payload, len, dl, &stop);
  pthread_mutex_unlock(&l->send_lock);
  return err;
}

loomResult_t boot_wire_error(struct loom_comm* comm, int err, const char* what) {
  switch (err) {
    case ETIMEDOUT:
      return err_set_sub(comm, SUB_BOOTSTRAP, loomTimeout, "bootstrap: timed out %s", what);
    case ECANCELED:
      return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage, "bootstrap: %s while %s",
                         comm_stop_reason(comm), what);
    default:
      return err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError, "bootstrap: %s failed: %s", what,
                         sock_err_str(err));
  }
}

/* ---- Ids ------------------------------------------------------------------ */

void boot_id_addr(const struct boot_id* id, union sock_addr* addr_out) {
  memset(addr_out, 0, sizeof(*addr_out));
  if (id->family == AF_INET6) {
    addr_out->sin6.sin6_family = AF_INET6;
    addr_out->sin6.sin6_port = id->port;
    memcpy(&addr_out->sin6.sin6_addr, id->addr, 16);
  } else {
    addr_out->sin.sin_family = AF_INET;
    addr_out->sin.sin_port = id->port;
    memcpy(&addr_out->sin.sin_addr, id->addr, 4);
  }
}

static void id_fill(struct boot_id* id, const union sock_addr* addr, uint64_t secret) {
  memset(id, 0, sizeof(*id));
  id->magic = BOOT_ID_MAGIC;
  id->version = BOOT_WIRE_VERSION;
  id->family = addr->sa.sa_family;
  if (addr->sa.sa_family == AF_INET6) {
    id->port = addr->sin6.sin6_port;
    memcpy(id->addr, &addr->sin6.sin6_addr, 16);
  } else {
    id->port = addr->sin.sin_port;
    memcpy(id->addr, &addr->sin.sin_addr, 4);
  }
  id->secret = secret;
}

void boot_id_release(const struct boot_id* id) {
  union sock_addr addr;
  boot_id_addr(id, &addr);
  boot_listen_forget(&addr, id->secret);
}

static loomResult_t secret_new(uint64_t* out) {
  uint64_t s = 0;
  while (s == 0) LOOM_CHECK(random_bytes(&s, sizeof(s))); /* 0 reads as "unset" */
  *out = s;
  return loomSuccess;
}

loomResult_t boot_id_create(struct boot_id* id_out) {
  union sock_addr addr;
  char ifname[64];
  uint64_t secret;
  LOOM_CHECK(sock_if_pick(&addr, ifname, sizeof(ifname)));
  LOOM_CHECK(secret_new(&secret));
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: unique id on interface %s", ifname);
  LOOM_CHECK(boot_listen_register(&addr, 1, secret));
  id_fill(id_out, &addr, secret);
  return loomSuccess;
}

loomResult_t boot_id_from_addr(const char* hostport, uint64_t secret, int listen,
                               struct boot_id* id_out) {
  union sock_addr addr;
  LOOM_CHECK(sock_addr_parse(hostport, &addr));
  if (listen) LOOM_CHECK(boot_listen_register(&addr, 0, secret));
  id_fill(id_out, &addr, secret);
  return loomSuccess;
}

/* ---- What other layers may read --------------------------------------------- */

uint64_t boot_secret(const struct loom_comm* comm) {
  return comm->boot->secret;
}

int boot_peer_left(const struct loom_comm* comm, int peer) {
  const struct bootstrap* b = comm->boot;
  if (b == NULL || peer < 0 || peer >= comm->nranks) return 0;
  return atomic_load_explicit(&b->left[peer], memory_order_acquire) != 0;
}

int boot_left_count(const struct loom_comm* comm) {
  const struct bootstrap* b = comm->boot;
  return b == NULL ? 0 : atomic_load_explicit(&b->nleft, memory_order_acquire);
}

int boot_route_addr(const struct loom_comm* comm, union sock_addr* addr_out) {
  const struct bootstrap* b = comm->boot;
  for (int i = 0; b != NULL && i < b->nlinks; i++) {
    union sock_addr a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    if (b->links[i].fd < 0 || getsockname(b->links[i].fd, &a.sa, &len) != 0) continue;
    *addr_out = a;
    return 0;
  }
  return -1;
}
