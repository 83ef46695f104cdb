/* fifo.h - the ring of slots that both host transports share.
 *
 * One FIFO carries one direction of one connection. The sender fills slot
 * head % nslots and publishes it by advancing head; the receiver drains slot
 * tail % nslots and frees it by advancing tail. Each side rings the other's
 * doorbell after moving its index. Every slot says how long the whole message
 * is, so a receiver that expects another size fails with a clear error
 * instead of reading garbage.
 *
 * shm puts the data in the slots (copy in, copy out); local puts only a
 * pointer to the sender's buffer there and the receiver reads it directly
 * (one copy), claiming the slot first so that a sender that gives up can
 * withdraw it safely.
 */
#ifndef LOOM_TRANSPORT_FIFO_H
#define LOOM_TRANSPORT_FIFO_H

#include <stdatomic.h>
#include <stdint.h>

struct bell;

#define FIFO_MAGIC 0x4c4d4649464f3031ULL /* "LMFIFO01" */
#define FIFO_MAX_SLOTS 64

enum fifo_slot_state { SLOT_FREE = 0, SLOT_POSTED, SLOT_CLAIMED, SLOT_CANCELLED };

struct fifo_slot {
  uint64_t msg_bytes;     /* the whole message this piece belongs to */
  uint64_t bytes;         /* this piece */
  uint64_t offset;        /* where this piece starts in the message */
  uint64_t ptr;           /* local: the sender's address of the piece */
  _Atomic uint32_t state; /* local: enum fifo_slot_state */
  uint32_t pad;
};

struct fifo_ctrl {
  _Atomic uint64_t magic; /* written last by the creator */
  uint32_t nslots;
  uint32_t pad0;
  uint64_t slot_bytes;
  uint64_t total_bytes; /* of the mapping: ctrl + data */
  /* shm: whose FIFO this is, checked by the receiver that maps it. */
  uint64_t comm_hash;
  int32_t src, dst, lane, pad1;
  _Atomic uint64_t head __attribute__((aligned(64)));
  _Atomic uint64_t tail __attribute__((aligned(64)));
  _Atomic uint32_t closed __attribute__((aligned(64))); /* a side aborted */
  _Atomic uint32_t refs;                                /* local: sides still holding it */
  _Atomic uint32_t attached;                            /* shm: the receiver has mapped it */
  struct fifo_slot slots[FIFO_MAX_SLOTS];
};

/* One side of a connection's FIFO as plain data: what a kernel or a proxy
 * thread needs to drive it without the transport's code (transport.h's
 * fifo_describe). A sender fills slot head % nslots (its bytes at data + i
 * * slot_bytes, its header slots[i]), then advances head with a release
 * store and rings peer_bell; a receiver waits for head > tail (acquire),
 * checks the header against the message it expects, takes the bytes,
 * advances tail (release) and rings peer_bell. closed != 0: the other side
 * gave up; stop. */
struct fifo_desc {
  struct fifo_slot* slots; /* nslots headers */
  char* data;              /* NULL: slots carry the sender's address (local), not bytes */
  _Atomic uint64_t* head;  /* pieces published by the sender */
  _Atomic uint64_t* tail;  /* pieces freed by the receiver */
  _Atomic uint32_t* closed;
  uint64_t slot_bytes; /* largest piece; 0: a slot names a whole message (local) */
  uint32_t nslots;
  int mem;                /* enum mem_kind of slots and data */
  struct bell* peer_bell; /* the other side's doorbell (NULL: none to ring) */
};

static inline size_t fifo_ctrl_bytes(void) {
  return (sizeof(struct fifo_ctrl) + 4095) & ~(size_t)4095;
}

#endif
