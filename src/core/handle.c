/* handle.c - the live-handle table (see handle.h).
 *
 * A handle is gen << 24 | slot << 4 | kind. The table is an array of
 * chunks of slots, allocated on demand and never freed, so a lookup never
 * races with growth; a slot holds the handle it serves while that handle is
 * live, and 0 otherwise. Looking a handle up is one compare of that word. */
#include "core/handle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/checks.h"

#define KIND_BITS 4
#define SLOT_BITS 20
#define CHUNK_BITS 10
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define NCHUNKS (1u << (SLOT_BITS - CHUNK_BITS))
#define GEN_SHIFT (KIND_BITS + SLOT_BITS)
#define GEN_MAX ((1ull << (64 - GEN_SHIFT)) - 1)

struct slot {
  _Atomic uint64_t live; /* the handle while it is live; 0 when free */
  void* _Atomic obj;
  uint64_t gen;       /* the generation of the next handle (under the lock) */
  uint32_t next_free; /* index + 1 of the next free slot; 0: none */
};

static struct slot* _Atomic chunks[NCHUNKS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t free_head; /* index + 1 */
static uint32_t nslots;    /* slots ever handed out */

static uint32_t slot_of(uint64_t h) {
  return (uint32_t)(h >> KIND_BITS) & ((1u << SLOT_BITS) - 1);
}
static uint64_t gen_of(uint64_t h) {
  return h >> GEN_SHIFT;
}
static unsigned kind_of(uint64_t h) {
  return (unsigned)(h & ((1u << KIND_BITS) - 1));
}

static struct slot* slot_at(uint32_t i) {
  struct slot* c = atomic_load_explicit(&chunks[i >> CHUNK_BITS], memory_order_acquire);
  return c ? &c[i & (CHUNK_SLOTS - 1)] : NULL;
}

const char* handle_kind_name(enum handle_kind kind) {
  switch (kind) {
    case HANDLE_COMM:
      return "communicator";
    case HANDLE_STREAM:
      return "stream";
    case HANDLE_REG:
      return "registration";
    default:
      return "handle";
  }
}

/* A free slot's index, growing the table when none is free. Under lock. */
static int slot_take(uint32_t* index_out) {
  if (free_head) {
    *index_out = free_head - 1;
    free_head = slot_at(*index_out)->next_free;
    return 0;
  }
  if (nslots == NCHUNKS * CHUNK_SLOTS) return -1;
  uint32_t c = nslots >> CHUNK_BITS;
  if (!atomic_load_explicit(&chunks[c], memory_order_relaxed)) {
    struct slot* s = calloc(CHUNK_SLOTS, sizeof(*s));
    if (!s) return -1;
    for (uint32_t k = 0; k < CHUNK_SLOTS; k++) s[k].gen = 1;
    atomic_store_explicit(&chunks[c], s, memory_order_release);
  }
  *index_out = nslots++;
  return 0;
}

loomResult_t handle_new(enum handle_kind kind, void* obj, uint64_t* h_out) {
  uint32_t i;
  pthread_mutex_lock(&table_lock);
  if (slot_take(&i) != 0) {
    pthread_mutex_unlock(&table_lock);
    return err_set(NULL, loomSystemError,
                   "cannot make a %s handle: out of memory or %u live handles",
                   handle_kind_name(kind), NCHUNKS * CHUNK_SLOTS);
  }
  struct slot* s = slot_at(i);
  uint64_t gen = s->gen;
  s->gen = gen == GEN_MAX ? 1 : gen + 1;
  uint64_t h = gen << GEN_SHIFT | (uint64_t)i << KIND_BITS | (uint64_t)kind;
  atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
  atomic_store_explicit(&s->live, h, memory_order_release);
  pthread_mutex_unlock(&table_lock);
  *h_out = h;
  return loomSuccess;
}

void* handle_get(uint64_t h, enum handle_kind kind) {
  if (kind_of(h) != (unsigned)kind || gen_of(h) == 0) return NULL;
  struct slot* s = slot_at(slot_of(h));
  if (!s || atomic_load_explicit(&s->live, memory_order_acquire) != h) return NULL;
  void* obj = atomic_load_explicit(&s->obj, memory_order_acquire);
  /* The slot may have been ended and reused between the two loads. */
  return atomic_load_explicit(&s->live, memory_order_acquire) == h ? obj : NULL;
}

void* handle_end(uint64_t h, enum handle_kind kind) {
  if (kind_of(h) != (unsigned)kind || gen_of(h) == 0) return NULL;
  uint32_t i = slot_of(h);
  struct slot* s = slot_at(i);
  if (!s) return NULL;
  pthread_mutex_lock(&table_lock);
  void* obj = NULL;
  uint64_t want = h;
  if (atomic_compare_exchange_strong(&s->live, &want, 0)) {
    obj = atomic_load_explicit(&s->obj, memory_order_relaxed);
    atomic_store_explicit(&s->obj, NULL, memory_order_relaxed);
    s->next_free = free_head;
    free_head = i + 1;
  }
  pthread_mutex_unlock(&table_lock);
  return obj;
}

const char* handle_why(uint64_t h, enum handle_kind kind) {
  if (h == 0) return "is NULL";
  unsigned k = kind_of(h);
  struct slot* s = gen_of(h) && k > 0 && k < HANDLE_KIND_MAX ? slot_at(slot_of(h)) : NULL;
  if (!s) return "is not a Loom handle";
  if (atomic_load_explicit(&s->live, memory_order_acquire) == h) {
    if (k == (unsigned)kind) return "is live";
    switch (k) {
      case HANDLE_STREAM:
        return "is a live stream, not this kind of handle";
      case HANDLE_COMM:
        return "is a live communicator, not this kind of handle";
      default:
        return "is a live registration, not this kind of handle";
    }
  }
  /* Generations are handed out in order: an older one was live once. */
  pthread_mutex_lock(&table_lock);
  uint64_t next = s->gen;
  pthread_mutex_unlock(&table_lock);
  if (gen_of(h) < next)
    return k == (unsigned)kind ? "was destroyed (or aborted) already"
                               : "is a handle of another kind, no longer live";
  return "is not a Loom handle";
}
