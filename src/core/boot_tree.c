/* boot_tree.c - the peer table's way from rank 0 to every rank.
 *
 * Rank 0 gathers every hello over the star (boot_init.c) and builds the
 * table: the communicator's hash, a peer_info row per rank and each rank's
 * address for links. It sends the table only to its children in the
 * binomial tree (ranks 1, 2, 4, 8, ...: ceil(log2 n) of them) over their
 * star sockets, and every other rank an 8-byte welcome (the hash) that says
 * everyone is in. Each rank that has the table passes it on to its own
 * children (boot_tree_children) over links. So rank 0 sends ceil(log2 n)
 * tables instead of n - 1, and the last rank has the table after
 * ceil(log2 n) hops (docs/bootstrap.md has the numbers).
 *
 * A rank waits for the table from its parent with its watcher running, so
 * every failure keeps its star path: a rank that dies on the way is seen by
 * rank 0, which tells everyone, and a rank waiting for the table from a
 * dead parent fails at once naming it.
 *
 * Init ends with a handshake over the star (boot_tree_done): every rank
 * tells rank 0 it has the table, and rank 0 tells every rank once all have
 * it. Without it rank 0 would leave init while the table still travels,
 * and a rank that fails at once (settings that differ, which every rank
 * judges from the table) would cut the table off from ranks still waiting
 * for it, which would then fail for the wrong reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/boot_internal.h"
#include "core/checks.h"

/* Enough for any int rank count. */
#define TREE_MAX_CHILDREN 32

/* Rank 0's children are the powers of two. */
static int root_child(int rank) {
  return rank > 0 && (rank & (rank - 1)) == 0;
}

static void root_report(struct bootstrap* b, const int* errs) {
  for (int r = 1; r < b->comm->nranks; r++) {
    if (errs[r] == 0) continue;
    char why[200];
    snprintf(why, sizeof(why), "peer %d could not be sent the %s (%s): it died or aborted", r,
             root_child(r) ? "peer table" : "welcome", sock_err_str(errs[r]));
    boot_peer_failed(b, r, loomRemoteError, why);
  }
}

loomResult_t boot_tree_root(struct bootstrap* b, const uint8_t* table, uint64_t comm_hash,
                            const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  int n = comm->nranks, kids[TREE_MAX_CHILDREN];
  int nkids = boot_tree_children(0, n, kids, TREE_MAX_CHILDREN);
  uint32_t len = (uint32_t)boot_table_len(n);
  int* errs = calloc((size_t)n, sizeof(int));
  if (errs == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError, "bootstrap: out of memory");
  /* Welcomes first: they fit the fresh sockets' buffers at once, so every
   * rank starts its watcher, which takes the links the table comes by,
   * while the tables go out. */
  for (int r = 1; r < n; r++)
    if (!root_child(r))
      errs[r] = boot_link_send(&b->links[r], 0, BOOT_WELCOME, 0, &comm_hash, sizeof(comm_hash), dl,
                               &comm->aborted);
  for (int k = 0; k < nkids; k++)
    errs[kids[k]] =
        boot_link_send(&b->links[kids[k]], 0, BOOT_TABLE, 0, table, len, dl, &comm->aborted);
  if (atomic_load(&comm->aborted)) { /* our own abort, not the peers' fault */
    free(errs);
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                       "bootstrap: rank 0 was aborted while sending the peer table");
  }
  root_report(b, errs);
  free(errs);
  LOOM_INFO(SUB_BOOTSTRAP,
            "bootstrap: peer table of %d ranks (%u bytes) sent to rank 0's %d tree children", n,
            len, nkids);
  return loomSuccess;
}

static loomResult_t tree_forward(struct bootstrap* b, const uint8_t* table,
                                 const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  int kids[TREE_MAX_CHILDREN];
  int nkids = boot_tree_children(comm->rank, comm->nranks, kids, TREE_MAX_CHILDREN);
  size_t len = boot_table_len(comm->nranks);
  for (int k = 0; k < nkids; k++)
    LOOM_CHECK(boot_peer_send(b, kids[k], BOOT_TABLE, 0, table, len, "the peer table", dl));
  if (nkids > 0)
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d passed the peer table on to %d ranks from %d",
              comm->rank, nkids, kids[0]);
  return loomSuccess;
}

loomResult_t boot_tree_pass(struct bootstrap* b, const uint8_t* table, struct peer_info* peers,
                            const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  struct boot_mail* m = NULL;
  int parent = boot_tree_parent(comm->rank);
  uint64_t hash;
  if (table == NULL) { /* the watcher checked its length and sender */
    LOOM_CHECK(boot_mail_wait(b, BOOT_TABLE, 0, parent, "the peer table", dl, &m));
    table = m->data;
  }
  boot_table_parse(table, comm->nranks, &hash, peers, b->addrs);
  loomResult_t res = loomSuccess;
  if (hash != comm->comm_hash)
    res = err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                      "bootstrap: rank %d: the peer table from rank %d is of another "
                      "communicator (hash %016llx, rank 0 said %016llx)",
                      comm->rank, parent, (unsigned long long)hash,
                      (unsigned long long)comm->comm_hash);
  if (res == loomSuccess) {
    comm_set_peers(comm, peers);
    res = tree_forward(b, table, dl);
  }
  free(m);
  return res;
}

/* Rank 0: every rank has said it has the table; now everyone hears so, all
 * before any failure notice (notify_lock), as the table itself once was. */
static loomResult_t done_root(struct bootstrap* b, const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  int n = comm->nranks;
  if (n < 2) return loomSuccess;
  for (int r = 1; r < n; r++) {
    struct boot_mail* m;
    LOOM_CHECK(
        boot_mail_wait(b, BOOT_DATA, BOOT_TAG_INIT, r, "word that it has the peer table", dl, &m));
    free(m);
  }
  int* errs = calloc((size_t)n, sizeof(int));
  if (errs == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError, "bootstrap: out of memory");
  pthread_mutex_lock(&b->notify_lock);
  for (int r = 1; r < n; r++)
    errs[r] =
        boot_link_send(&b->links[r], 0, BOOT_DATA, BOOT_TAG_INIT, NULL, 0, dl, &comm->aborted);
  pthread_mutex_unlock(&b->notify_lock);
  for (int r = 1; r < n; r++) {
    if (errs[r] == 0) continue;
    char why[200];
    snprintf(why, sizeof(why), "peer %d could not be told that init is over (%s): it died", r,
             sock_err_str(errs[r]));
    boot_peer_failed(b, r, loomRemoteError, why);
  }
  free(errs);
  /* Not the communicator's health: a rank may fail at once after its word
   * (its own check of the table), and that is the next step's news. */
  return loomSuccess;
}

loomResult_t boot_tree_done(struct bootstrap* b, const struct deadline* dl) {
  struct loom_comm* comm = b->comm;
  struct boot_mail* m;
  if (comm->nranks == 1) return loomSuccess;
  if (comm->rank == 0) return done_root(b, dl);
  LOOM_CHECK(boot_peer_send(b, 0, BOOT_DATA, BOOT_TAG_INIT, NULL, 0,
                            "word that it has the peer table", dl));
  LOOM_CHECK(
      boot_mail_wait(b, BOOT_DATA, BOOT_TAG_INIT, 0, "word that every rank has the table", dl, &m));
  free(m);
  return loomSuccess;
}
