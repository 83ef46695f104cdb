/* boot_init.c - the rendezvous. Rank 0 takes every rank's hello from its
 * id's listener (boot_listen.c) and sends the peer table down the tree
 * (boot_tree.c); the others open their listener for links, connect, say
 * hello and wait for the table (from rank 0 or their tree parent).
 *
 * Strangers never reach this file: the listener's pending set
 * (core/accept.h) reads every hello without blocking, bounds and times out
 * the silent, and drops whatever does not carry this id's secret. What
 * arrives here knows the secret; a rank that cannot join is told why. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/boot_internal.h"
#include "core/checks.h"
#include "core/fault.h"

/* What rank 0 has gathered so far. */
struct accept_ctx {
  struct bootstrap* b;
  struct peer_info* peers;
  struct boot_addr* addrs;
  struct boot_claim* claim;
  int joined; /* ranks other than 0 that are in */
};

static void arrival_close(struct boot_arrival* a) {
  sock_close(a->fd);
  free(a);
}

/* A rank that knows the secret but cannot join is told why before the close,
 * so that its boot_init fails with the reason instead of a bare EOF. */
static void arrival_refuse(struct boot_arrival* a, int rank, const char* why) {
  char text[SOCK_ADDR_STRLEN];
  struct {
    struct boot_hdr h;
    char why[BOOT_REFUSED_MAX];
  } msg;
  size_t len = strlen(why) + 1;
  len = LOOM_MIN(len, sizeof(msg.why));
  LOOM_WARN(SUB_BOOTSTRAP, "bootstrap: refused rank %d from %s: %s", rank,
            sock_addr_str(&a->addr, text, sizeof(text)), why);
  boot_hdr_fill(&msg.h, 0, BOOT_REFUSED, 0, (uint32_t)len);
  snprintf(msg.why, sizeof(msg.why), "%s", why);
  sock_send_nowait(a->fd, &msg, sizeof(msg.h) + len); /* fresh socket: it fits */
  arrival_close(a);
}

static void arrival_promote(struct accept_ctx* c, struct boot_arrival* a) {
  const struct boot_hello* hello = &a->hello;
  struct boot_link* l = &c->b->links[hello->rank];
  char text[SOCK_ADDR_STRLEN];
  l->fd = a->fd;
  l->addr = a->addr;
  c->peers[hello->rank] = hello->info;
  c->peers[hello->rank].rank = hello->rank;
  c->peers[hello->rank].hostname[sizeof(hello->info.hostname) - 1] = '\0';
  c->addrs[hello->rank] = hello->link;
  c->joined++;
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d joined from %s (%d of %d)", hello->rank,
            sock_addr_str(&l->addr, text, sizeof(text)), c->joined + 1, c->b->comm->nranks);
  free(a);
}

/* A hello with this communicator's secret: let the rank in, or tell it why
 * not. */
static void arrival_decide(struct accept_ctx* c, struct boot_arrival* a) {
  char why[160];
  loomResult_t res =
      boot_hello_check(&a->hello, a->len, c->b->secret, c->b->comm->nranks, why, sizeof(why));
  if (res == loomRemoteError) { /* short: the secret alone is no proof of a rank */
    char text[SOCK_ADDR_STRLEN];
    LOOM_WARN(SUB_BOOTSTRAP, "bootstrap: refused a connection from %s: %s",
              sock_addr_str(&a->addr, text, sizeof(text)), why);
    return arrival_close(a);
  }
  if (res != loomSuccess) return arrival_refuse(a, a->hello.rank, why);
  if (c->b->links[a->hello.rank].fd >= 0) {
    char text[SOCK_ADDR_STRLEN];
    snprintf(why, sizeof(why), "rank %d already joined from %s", a->hello.rank,
             sock_addr_str(&c->b->links[a->hello.rank].addr, text, sizeof(text)));
    return arrival_refuse(a, a->hello.rank, why);
  }
  arrival_promote(c, a);
}

static loomResult_t accept_timeout(struct accept_ctx* c, char* why, size_t why_len) {
  struct loom_comm* comm = c->b->comm;
  char missing[96] = "";
  size_t used = 0;
  for (int r = 1; r < comm->nranks && used < sizeof(missing) - 16; r++) {
    if (c->b->links[r].fd >= 0) continue;
    used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d", used ? "," : "", r);
  }
  if (used >= sizeof(missing) - 16) snprintf(missing + used, sizeof(missing) - used, ",...");
  snprintf(why, why_len,
           "timed out after %lld ms waiting for ranks to join: %d of %d arrived, missing ranks %s",
           comm->timeout_ms, c->joined + 1, comm->nranks, missing);
  return err_set_sub(comm, SUB_BOOTSTRAP, loomTimeout, "bootstrap: %s", why);
}

/* Waits until every rank has said hello. On failure why says what went
 * wrong, for the ranks already in. */
static loomResult_t accept_loop(struct accept_ctx* c, const struct deadline* dl, char* why,
                                size_t why_len) {
  struct loom_comm* comm = c->b->comm;
  while (c->joined < comm->nranks - 1) {
    if (atomic_load(&comm->aborted)) {
      snprintf(why, why_len, "rank 0: %s during the rendezvous", comm_stop_reason(comm));
      return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage, "bootstrap: %s", why);
    }
    if (deadline_passed(dl)) return accept_timeout(c, why, why_len);
    struct boot_arrival* a = boot_listen_wait(c->claim, dl, &comm->aborted);
    while (a != NULL) {
      struct boot_arrival* next = a->next;
      arrival_decide(c, a);
      a = next;
    }
  }
  return loomSuccess;
}

/* Tells the ranks already in that the rendezvous failed, so they fail with
 * the reason instead of waiting for their own deadline. Best effort. */
static void accept_fail_notify(struct accept_ctx* c, loomResult_t code, const char* why) {
  struct {
    struct boot_hdr h;
    struct boot_failed f;
  } msg;
  memset(&msg, 0, sizeof(msg));
  boot_hdr_fill(&msg.h, 0, BOOT_FAILED, 0, sizeof(msg.f));
  msg.f.rank = -1;
  msg.f.code = code;
  snprintf(msg.f.why, sizeof(msg.f.why), "%s", why);
  for (int r = 1; r < c->b->nlinks; r++)
    if (c->b->links[r].fd >= 0) sock_send_nowait(c->b->links[r].fd, &msg, sizeof(msg));
}

/* The table on the wire (boot_table_len): comm_hash, rows, addresses. */
static loomResult_t table_build(struct bootstrap* b, const struct peer_info* peers,
                                uint64_t comm_hash, uint8_t** out) {
  int n = b->comm->nranks;
  size_t rows = (size_t)n * sizeof(*peers);
  uint8_t* t = malloc(boot_table_len(n));
  if (t == NULL)
    return err_set_sub(b->comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a peer table of %zu bytes", boot_table_len(n));
  memcpy(t, &comm_hash, sizeof(comm_hash));
  memcpy(t + sizeof(comm_hash), peers, rows);
  memcpy(t + sizeof(comm_hash) + rows, b->addrs, (size_t)n * sizeof(*b->addrs));
  *out = t;
  return loomSuccess;
}

static loomResult_t root_rendezvous(struct bootstrap* b, const struct peer_info* self,
                                    struct peer_info* peers, uint64_t* hash_out,
                                    const struct deadline* dl) {
  struct accept_ctx c = {.b = b, .peers = peers, .addrs = b->addrs};
  char why[200] = "";
  uint8_t* table = NULL;
  peers[0] = *self;
  peers[0].rank = 0;
  LOOM_CHECK(boot_listen_claim(b->comm, &b->root_addr, b->secret, &c.claim));
  loomResult_t res = accept_loop(&c, dl, why, sizeof(why));
  if (res != loomSuccess) accept_fail_notify(&c, res, why);
  if (res == loomSuccess) res = random_bytes(hash_out, sizeof(*hash_out));
  if (res == loomSuccess) res = table_build(b, peers, *hash_out, &table);
  if (res == loomSuccess) res = boot_tree_root(b, table, *hash_out, dl);
  free(table);
  /* Whoever still waits for this id goes now: nobody else may join. */
  boot_listen_release(c.claim);
  if (res == loomSuccess) fault_point("init", 0);
  return res;
}

/* ---- Other ranks ------------------------------------------------------------ */

static loomResult_t join_recv(struct bootstrap* b, void* buf, size_t len, const char* what,
                              const struct deadline* dl) {
  int err = sock_recv_all(b->links[0].fd, buf, len, dl, &b->comm->aborted);
  if (err == 0) return loomSuccess;
  char text[SOCK_ADDR_STRLEN], msg[160];
  snprintf(msg, sizeof(msg), "waiting for %s from rank 0 at %s", what,
           sock_addr_str(&b->root_addr, text, sizeof(text)));
  return boot_wire_error(b->comm, err, msg);
}

/* Rank 0 gave up (timeout, abort) and said why. */
static loomResult_t join_failed(struct bootstrap* b, const struct deadline* dl) {
  struct boot_failed f;
  LOOM_CHECK(join_recv(b, &f, sizeof(f), "the failure report", dl));
  f.why[sizeof(f.why) - 1] = '\0';
  loomResult_t code = (loomResult_t)f.code;
  if (code <= loomSuccess || code >= loomNumResults || code == loomInProgress)
    code = loomRemoteError;
  return err_set_sub(b->comm, SUB_BOOTSTRAP, code,
                     "bootstrap: rank 0 gave up on the rendezvous: %s", f.why);
}

static loomResult_t join_refused(struct bootstrap* b, uint32_t len, const struct deadline* dl) {
  char why[BOOT_REFUSED_MAX + 1];
  LOOM_CHECK(join_recv(b, why, len, "the refusal", dl));
  why[len] = '\0';
  return err_set_sub(b->comm, SUB_BOOTSTRAP, loomInvalidUsage,
                     "bootstrap: rank 0 refused rank %d: %s", b->comm->rank, why);
}

/* The table (a tree child of rank 0), or the welcome and with it the hash
 * (*table_out NULL: the table comes from the tree parent). */
static loomResult_t join_wait_table(struct bootstrap* b, uint8_t** table_out, uint64_t* hash_out,
                                    const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  struct boot_hdr h;
  char why[160];
  size_t table_len = boot_table_len(comm->nranks);
  uint32_t bound = (uint32_t)LOOM_MIN(LOOM_MAX(table_len, BOOT_REFUSED_MAX), BOOT_MAX_PAYLOAD);
  LOOM_CHECK(join_recv(b, &h, sizeof(h), "the peer table", dl));
  if (boot_hdr_check(&h, bound, why, sizeof(why)) != loomSuccess)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                       "bootstrap: bad reply from rank 0 during the rendezvous: %s", why);
  if (h.type == BOOT_FAILED && h.length == sizeof(struct boot_failed)) return join_failed(b, dl);
  if (h.type == BOOT_REFUSED && h.length <= BOOT_REFUSED_MAX) return join_refused(b, h.length, dl);
  if (h.type == BOOT_WELCOME && h.length == sizeof(*hash_out) &&
      boot_tree_parent(comm->rank) != 0) {
    *table_out = NULL;
    return join_recv(b, hash_out, sizeof(*hash_out), "the welcome", dl);
  }
  if (h.type != BOOT_TABLE || h.length != table_len)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                       "bootstrap: rank 0 sent a %s message of %u bytes; expected a peer table "
                       "of %zu bytes",
                       boot_type_name(h.type), h.length, table_len);
  uint8_t* table = malloc(table_len);
  if (table == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a peer table of %zu bytes", table_len);
  loomResult_t res = join_recv(b, table, table_len, "the peer table", dl);
  if (res != loomSuccess) {
    free(table);
    return res;
  }
  boot_table_parse(table, comm->nranks, hash_out, NULL, NULL);
  *table_out = table;
  return loomSuccess;
}

/* Peers other than rank 0 dial this rank on the interface its connection
 * to rank 0 leaves by: the route every rank shares. Two ranks need none. */
static loomResult_t join_listen(struct bootstrap* b) {
  union sock_addr local;
  socklen_t len = sizeof(local);
  memset(&local, 0, sizeof(local));
  if (b->comm->nranks <= 2) return loomSuccess;
  if (getsockname(b->links[0].fd, &local.sa, &len) != 0)
    return err_set_sub(b->comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: getsockname on the connection to rank 0 failed: %s",
                       strerror(errno));
  return boot_link_listen(b, &local);
}

static loomResult_t join_rendezvous(struct bootstrap* b, const struct peer_info* self,
                                    uint8_t** table_out, uint64_t* hash_out,
                                    const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  struct boot_link* l = &b->links[0];
  char text[SOCK_ADDR_STRLEN], what[128];
  sock_addr_str(&b->root_addr, text, sizeof(text));
  l->peer = 0;
  l->addr = b->root_addr;
  LOOM_CHECK(sock_connect(comm, &b->root_addr, "rank 0", dl, &comm->aborted, &l->fd));
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d connected to rank 0 at %s", comm->rank, text);
  LOOM_CHECK(join_listen(b));
  struct boot_hello hello = {.secret = b->secret, .nranks = comm->nranks, .rank = comm->rank};
  hello.info = *self;
  hello.info.rank = comm->rank;
  hello.link = b->lsn_addr;
  int err = boot_link_send(l, comm->rank, BOOT_HELLO, 0, &hello, sizeof(hello), dl, &comm->aborted);
  if (err != 0) {
    snprintf(what, sizeof(what), "sending the hello to rank 0 at %s", text);
    return boot_wire_error(comm, err, what);
  }
  fault_point("init", comm->rank);
  return join_wait_table(b, table_out, hash_out, dl);
}

/* ---- Entry ------------------------------------------------------------------ */

int boot_id_check(const struct boot_id* id, char* why, size_t len) {
  if (id->magic == BOOT_ID_MAGIC && id->version == BOOT_WIRE_VERSION &&
      (id->family == AF_INET || id->family == AF_INET6))
    return 0;
  snprintf(why, len,
           "the unique id is not valid (magic 0x%08x, version %u, family %u): was it made by "
           "loomGetUniqueId?",
           id->magic, id->version, id->family);
  return -1;
}

static loomResult_t id_check(struct loom_comm* comm, const struct boot_id* id) {
  char why[200];
  if (boot_id_check(id, why, sizeof(why)) != 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument, "bootstrap: %s", why);
  if (comm->nranks < 1 || comm->rank < 0 || comm->rank >= comm->nranks)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: rank %d out of range for %d ranks", comm->rank, comm->nranks);
  size_t table_len = boot_table_len(comm->nranks);
  if (table_len > BOOT_MAX_PAYLOAD)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: a peer table for %d ranks (%zu bytes) is over the %u-byte "
                       "message bound",
                       comm->nranks, table_len, BOOT_MAX_PAYLOAD);
  return loomSuccess;
}

loomResult_t boot_init(struct loom_comm* comm, const struct boot_id* id,
                       const struct peer_info* self) {
  struct bootstrap* b = NULL;
  uint8_t* table = NULL;
  uint64_t hash = 0;
  loomResult_t res;
  LOOM_CHECK(id_check(comm, id));
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  struct peer_info* peers = calloc((size_t)comm->nranks, sizeof(*peers));
  if (peers == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for %d peer rows", comm->nranks);
  LOOM_CHECK_GOTO(boot_state_alloc(comm, comm->rank == 0 ? comm->nranks : 1, &b), res, fail);
  b->secret = id->secret;
  boot_id_addr(id, &b->root_addr);
  if (comm->rank == 0)
    LOOM_CHECK_GOTO(root_rendezvous(b, self, peers, &hash, &dl), res, fail);
  else
    LOOM_CHECK_GOTO(join_rendezvous(b, self, &table, &hash, &dl), res, fail);
  /* Before the watcher starts: it checks links against the hash, and a
   * failure it records reads the table (rank 0 has it now; the others
   * publish it once it is in, comm_set_peers). */
  if (comm->rank == 0) comm->peers = peers;
  comm->comm_hash = hash;
  comm->boot = b;
  LOOM_CHECK_GOTO(boot_watcher_start(b), res, fail);
  if (comm->rank != 0) LOOM_CHECK_GOTO(boot_tree_pass(b, table, peers, &dl), res, fail);
  LOOM_CHECK_GOTO(boot_tree_done(b, &dl), res, fail);
  free(table);
  return loomSuccess;
fail:
  /* The watcher first: it may read the table until it stops. */
  if (b != NULL) boot_state_free(b, 0);
  comm->peers = NULL;
  comm->boot = NULL;
  free(table);
  free(peers);
  return res;
}
