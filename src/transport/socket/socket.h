/* socket.h - the socket transport's insides, shared by socket.c (the table:
 * what the executor calls), socket_net.c (its side of the communicator's
 * progress engine: accepting, handshakes, connecting) and socket_stream.c
 * (moving frames).
 *
 * Threads. The executor thread(s) of a communicator post transfers and test
 * them; the communicator's progress engine (transport/progress.h), of which
 * this transport is a client, accepts, connects and says the hellos on its
 * thread. Once a connection is up, its bytes are moved by whichever thread
 * is at it: the executor at post and while it polls, the engine's thread
 * while the executor sleeps (the engine's idle hand-over: a stream's
 * callback parks it while the executor polls). A connection's lock guards
 * its message ring and its streams' progress: every mover holds it while it
 * reads or writes the caller's buffers, so cancel and close, which take it,
 * know that no byte of a withdrawn transfer moves once they return.
 * Completion is published through an atomic counter, read without the lock.
 *
 * Wire. Two ranks share one link per lane: nstreams TCP streams that carry
 * both directions, so that what one rank sends back carries the TCP
 * acknowledgements of what it received (no bare acknowledgement per message
 * each way), and a pair costs nstreams descriptors a side, not twice as many.
 * The lower rank of the pair opens the streams (a rank's link to itself
 * opens them to its own listener: it writes the connected ends and reads the
 * accepted ones) and starts each with a struct sock_hello; the higher rank
 * accepts them and takes their count from the hellos. The two directions
 * are two connections (struct sock_conn), each with its own messages, lock
 * and per-stream progress, on the link's sockets: a send and a receive on
 * one socket from two threads at once are independent. Lanes keep links of
 * their own: a frame that waits for its receive to be posted holds up the
 * frames behind it on its stream, and one lane must not wait for another.
 * Every message goes as one or more frames, each a struct sock_frame and
 * len payload bytes; the frames of a message are cut at LOOM_SOCKET_CHUNK
 * and dealt round robin over the streams. The receiver needs no knowledge of
 * the dealing: each frame says which message it belongs to and where its
 * bytes go. Host byte order: both ends run the same build (a foreign byte
 * order fails the magic checks). */
#ifndef LOOM_TRANSPORT_SOCKET_H
#define LOOM_TRANSPORT_SOCKET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/accept.h"
#include "core/sock.h"
#include "transport/progress.h"
#include "transport/transport.h"

/* "p2p" or "collective", for messages. */
static inline const char* sock_lane_name(int lane) {
  return lane == LANE_P2P ? "p2p" : "collective";
}

#define SOCK_HELLO_MAGIC 0x4c4d534bu /* "LMSK" */
#define SOCK_FRAME_MAGIC 0x4c4d4652u /* "LMFR" */
#define SOCK_WIRE_VERSION 2          /* 2: links carry both directions */
#define SOCK_MAX_STREAMS 16
/* A connection that has not said a complete hello by then is dropped. */
#define SOCK_HELLO_MS 10000

struct sock_hello {
  uint32_t magic;
  uint16_t version;
  uint16_t bytes; /* sizeof(struct sock_hello) */
  uint64_t secret;
  uint64_t comm_hash;
  int32_t src; /* the sending rank */
  int32_t dst; /* the rank it means to reach */
  uint16_t lane;
  uint16_t stream;
  uint16_t nstreams;
  uint16_t pad;
};

struct sock_frame {
  uint32_t magic;
  uint32_t len;     /* payload bytes after this header */
  uint32_t nframes; /* frames of the whole message */
  uint32_t pad;
  uint64_t seq;       /* the message's number on its connection, from 0 */
  uint64_t msg_bytes; /* the whole message */
  uint64_t offset;    /* of this frame's payload in the message */
};

/* One posted transfer, as the movers track it. */
struct sock_msg {
  struct xfer* x;
  uint32_t nframes;     /* receiver: 0 until the first frame says */
  uint32_t frames_done; /* frames moved completely */
  uint32_t first;       /* sender: the stream of frame 0 */
  size_t bytes_done;    /* receiver: payload bytes landed */
};

enum sock_stream_state {
  ST_IDLE,       /* no socket yet */
  ST_CONNECTING, /* the opening side: connect() in flight */
  ST_RETRY,      /* the opening side: waiting to connect again */
  ST_HELLO,      /* the opening side: connected, its hello not all sent */
  ST_UP,
  ST_FINISHED /* the peer closed it at a frame boundary */
};

struct sock_conn;
struct sock_link;

/* One direction's progress on one stream of its link, under the connection's
 * lock. */
struct sock_stream {
  struct sock_conn* conn;
  int index;
  int fd; /* the link's socket (-1 until the link is up); the link closes it */
  enum sock_stream_state state;
  /* Sender. */
  uint64_t seq;  /* the message whose frames it sends now */
  int64_t frame; /* its next frame in that message; -1: not worked out */
  struct sock_frame out;
  size_t out_done; /* bytes of header + payload of the current frame sent */
  /* Receiver. The stream's bytes are read into rbuf (made on the first read), except a
   * payload's rest, read straight to its place when rbuf is empty; rbuf[rb_at..rb_end) are
   * read and not yet taken. */
  char* rbuf;
  size_t rb_at, rb_end;
  int drained; /* a read this round found the socket empty: no second try */
  struct sock_frame in;
  size_t in_got;  /* header bytes taken (0 or all) */
  int in_checked; /* the header matched its posted message */
  size_t pay_got; /* payload bytes read (into dst or the bounce buffer) */
  char* bounce;   /* reduce receives: the incoming bytes before reducing */
  size_t bounce_have;
};

struct sock_conn {
  struct conn base; /* first */
  struct sock_comm* sc;
  pthread_mutex_t lock;
  /* Under lock. Messages head..tail-1 are posted, not all done; message s
   * lives at ring[s & (cap - 1)]. */
  struct sock_msg* ring;
  uint64_t cap, head, tail;
  int dead;      /* cancelled or closed: touch none of its buffers */
  int peer_gone; /* the peer closed its end; why says how */
  int nstreams;  /* the link's, once it is up (0 before) */
  uint32_t rr;   /* sender: the stream of the next frame dealt */
  struct sock_stream streams[SOCK_MAX_STREAMS];
  /* Read without the lock. */
  _Atomic uint64_t completed; /* messages before this one are done */
  _Atomic int up;             /* its link is up: every stream has its socket */
  _Atomic int broken;         /* set once, after why and code */
  loomResult_t code;
  char why[256];
  /* The thread's lists. */
  _Atomic int queued; /* on sc->dirty */
  struct sock_conn* next_new;
  struct sock_conn* next_dirty;
  struct sock_conn* next_closing;
  /* The engine thread's own. */
  struct sock_link* link;
  struct sock_conn* next_all;
  struct sock_conn* prev_all;
  struct sock_conn* next_batch;
  int in_batch; /* on this round's list of connections to progress */
};

/* One TCP stream of a link, the engine thread's. */
struct sock_sock {
  struct sock_link* link;
  int index;
  int fd;
  int in;                    /* the accepted end of a rank's link to itself: its reads */
  struct progress_fd* watch; /* the engine's handle of fd */
  enum sock_stream_state state;
  /* The opening side. */
  uint64_t retry_at_ns;
  long long backoff_ms;
  size_t hello_sent;
  struct sock_hello hello;
};

/* What two ranks share on one lane (the engine thread's): the streams, and
 * the connections of the two directions that use them once made. */
struct sock_link {
  struct sock_comm* sc;
  int peer, lane;
  int opens;    /* this rank opens the streams: the lower rank, or a link to itself */
  int started;  /* the opening side began to connect */
  int nstreams; /* 0 until known (the accepting side: the first hello) */
  int up;
  int connecting; /* counted in sc->nconnecting */
  struct deadline connect_dl;
  int broken;
  loomResult_t code;
  char why[256];
  struct sock_conn* send;
  struct sock_conn* recv;
  struct sock_sock socks[SOCK_MAX_STREAMS];
  struct sock_sock self_in[SOCK_MAX_STREAMS]; /* a link to itself: the accepted ends */
  struct sock_link* next_all;
};

/* A stream whose hello was right, parked until this rank makes the link it
 * names (its first connection to that peer on that lane): nothing is held
 * for a peer before this rank needs it. Unwatched until then. (Before its
 * hello a connection belongs to the accept set.) */
struct sock_pending {
  int fd;
  union sock_addr addr;
  struct sock_hello hello;
  struct sock_pending* next;
};

/* The transport's state for one communicator. */
struct sock_comm {
  struct loom_comm* comm;
  uint64_t secret;
  int nstreams;
  size_t chunk;
  size_t bufsize;
  union sock_addr* addrs; /* every rank's listening address */
  int listen_fd;
  char who[48];                   /* "rank R: socket transport", for the accept set's lines */
  struct progress* engine;        /* the communicator's (tp_progress_get) */
  struct progress_client* client; /* NULL once it left the engine */
  struct progress_fd* accept_watch;
  /* Under lock: what the executor hands the engine's thread. */
  pthread_mutex_t lock;
  struct sock_conn* new_list;
  struct sock_conn* dirty_list;
  struct sock_conn* closing_list;
  /* Set once when the engine stopped for good (why says so): connections
   * made from then on break at once. */
  _Atomic int engine_failed;
  char engine_why[128];
  /* The engine thread's own. */
  struct sock_conn* batch;     /* connections to progress this round */
  struct sock_link** links;    /* [lane * nranks + peer], made on first use */
  struct sock_link* all_links; /* the same, as a list */
  struct sock_conn* all;
  /* Accepted connections until their hello is through: bounded, with
   * deadlines and eviction, so strangers cannot use up the descriptors. */
  struct accept_set* accept;
  struct sock_pending* parked; /* at most one per (peer, lane, stream) */
  int nconnecting;             /* links whose streams are not all up (they retry on a timer) */
};

/* ---- socket.c: helpers the thread uses ---- */

/* Records why the connection cannot go on (once) and wakes the rank. Takes
 * nothing: the caller holds c->lock. */
void sock_conn_break(struct sock_conn* c, loomResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The peer closed its end: an error for what is posted or comes later. */
void sock_conn_peer_gone(struct sock_conn* c, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Retires the leading finished messages, publishes the count and wakes
 * the rank. Under c->lock. */
void sock_conn_retire(struct sock_conn* c);
/* Rings this rank's doorbell. */
void sock_wake_rank(struct sock_comm* sc);
/* Tells the engine's thread to look at c (any thread). */
void sock_conn_kick(struct sock_conn* c);
/* Frees a connection nobody references any more. */
void sock_conn_free(struct sock_conn* c);

/* The wire checks, pure (the fuzz harnesses call them on outside input). Each returns NULL or
 * why the header cannot be taken. A hello arriving at rank self of a communicator (buf holds
 * a formatted reason; only a lower rank, or self, opens a link); a frame header by itself, head
 * being the first message not retired; a frame against its message so far (nframes: 0 until a frame
 * said it; reduce_esize: the element size of a receive that reduces, else 0). */
const char* sock_hello_problem(const struct sock_hello* h, uint64_t secret, uint64_t comm_hash,
                               int nranks, int self, char* buf, size_t len);
const char* sock_frame_problem(const struct sock_frame* f, uint64_t head);
const char* sock_frame_mismatch(const struct sock_frame* f, uint32_t nframes, uint32_t frames_done,
                                size_t reduce_esize);
/* The bounce buffer of a stream whose receives reduce (made on the first such receive). */
#define SOCK_BOUNCE_MAX (256u << 10)
static inline size_t sock_bounce_bytes(const struct sock_conn* c) {
  return LOOM_MIN((size_t)SOCK_BOUNCE_MAX, c->sc->chunk);
}

/* A stream's receive buffer: a frame of up to this much, header included, comes in with
 * one recv (and the next header with the rest of a larger one). */
#define SOCK_RBUF_BYTES (16u << 10)

/* ---- socket_net.c: the transport's side of the progress engine ---- */

/* Joins the communicator's progress engine (starting its thread) and
 * watches the listener. */
loomResult_t sock_net_start(struct sock_comm* sc);
/* Leaves the engine (after which none of its callbacks runs), then
 * releases every connection and socket. Never blocks on peers. */
void sock_net_stop(struct sock_comm* sc);

/* ---- socket_stream.c: frames, under c->lock, on any thread ---- */

/* Moves what it can on every stream of c without waiting. */
void sock_stream_progress(struct sock_conn* c);

#endif
