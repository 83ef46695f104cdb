/* socket_stream.c - frames on the streams of one connection (one direction
 * of a link: socket.h), moved under the connection's lock (by the executor
 * or the network thread), never waiting: each stream goes as far as the
 * socket lets it (EAGAIN) or as far as what is posted. The other direction
 * reads or writes the same sockets under its own lock.
 *
 * Sender: frame k of message m goes on stream (first(m) + k) % nstreams,
 * where first(m) continues the round robin of the message before, so small
 * messages spread over the streams and large ones cut into
 * LOOM_SOCKET_CHUNK pieces fill all of them. A stream sends its frames in
 * message order, header and payload in one sendmsg, straight from the
 * caller's buffer.
 *
 * Receiver: a stream reads what its socket has into a small buffer of its
 * own, so that one recv takes a small frame whole, header and payload (and
 * a large frame's rest goes straight to its place, with the next header
 * behind it in the buffer). It takes a header, waits (stops reading once
 * the buffer holds it) until the message it names is posted, checks it
 * against the posted receive (size, bounds) and takes the payload into the
 * destination, or, for a receive that reduces, through a bounce buffer
 * reduced into the destination as whole elements arrive. A read that comes
 * back short emptied the socket, so a round tries no second one (no EAGAIN
 * after every message): what arrives later comes with the engine's edge or
 * the executor's next poll. A message is done when all of its frames are
 * in, whichever streams they came by. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/checks.h"
#include "core/dtype.h"
#include "transport/socket/socket.h"

static struct sock_msg* msg_at(struct sock_conn* c, uint64_t seq) {
  return &c->ring[seq & (c->cap - 1)];
}

/* A stream's socket failed or closed in the middle of something. */
static void stream_lost(struct sock_conn* c, struct sock_stream* s, int err) {
  sock_conn_break(c, loomRemoteError,
                  "peer %d closed its socket connection (%s lane, stream %d) in the middle of a "
                  "message: %s (it aborted, failed or was destroyed)",
                  c->base.peer, sock_lane_name(c->base.lane), s->index,
                  err == 0 ? "end of stream" : strerror(err));
}

/* ---- Sender ------------------------------------------------------------------ */

/* The message whose frame s sends next, or NULL when nothing posted is for s. */
static struct sock_msg* send_next(struct sock_conn* c, struct sock_stream* s) {
  int ns = c->nstreams;
  if (s->seq < c->head) { /* messages all of whose frames went elsewhere */
    s->seq = c->head;
    s->frame = -1;
  }
  while (s->seq < c->tail) {
    struct sock_msg* m = msg_at(c, s->seq);
    if (s->frame < 0) s->frame = (s->index - (int)m->first + ns) % ns;
    if ((uint64_t)s->frame < m->nframes) return m;
    s->seq++;
    s->frame = -1;
  }
  return NULL;
}

static void frame_fill(struct sock_conn* c, struct sock_stream* s, const struct sock_msg* m) {
  uint64_t off = (uint64_t)s->frame * c->sc->chunk;
  memset(&s->out, 0, sizeof(s->out));
  s->out.magic = SOCK_FRAME_MAGIC;
  s->out.len = (uint32_t)LOOM_MIN((uint64_t)c->sc->chunk, m->x->bytes - off);
  s->out.nframes = m->nframes;
  s->out.seq = s->seq;
  s->out.msg_bytes = m->x->bytes;
  s->out.offset = off;
}

static void send_progress(struct sock_conn* c, struct sock_stream* s) {
  struct sock_msg* m;
  while ((m = send_next(c, s)) != NULL) {
    if (s->out_done == 0) frame_fill(c, s, m);
    const size_t hdr = sizeof(s->out), len = s->out.len;
    struct iovec iov[2];
    int niov = 0;
    if (s->out_done < hdr)
      iov[niov++] = (struct iovec){(char*)&s->out + s->out_done, hdr - s->out_done};
    size_t pay_done = s->out_done > hdr ? s->out_done - hdr : 0;
    if (len > pay_done)
      iov[niov++] =
          (struct iovec){(char*)(uintptr_t)m->x->src + s->out.offset + pay_done, len - pay_done};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) stream_lost(c, s, errno);
      return;
    }
    s->out_done += (size_t)n;
    if (s->out_done < hdr + len) continue; /* the socket took part: the next try says EAGAIN */
    s->out_done = 0;
    m->frames_done++;
    s->frame += c->nstreams;
  }
}

/* ---- Receiver ---------------------------------------------------------------- */

static int frame_bad(struct sock_conn* c, const char* what) {
  sock_conn_break(c, loomRemoteError, "peer %d sent a malformed socket frame: %s", c->base.peer,
                  what);
  return 0;
}

const char* sock_frame_problem(const struct sock_frame* f, uint64_t head) {
  if (f->magic != SOCK_FRAME_MAGIC) return "bad magic";
  if (f->seq < head || f->seq - head > (1u << 30)) return "unexpected message number";
  if (f->nframes == 0 || f->len > f->msg_bytes || f->offset > f->msg_bytes - f->len)
    return "bad bounds";
  return NULL;
}

const char* sock_frame_mismatch(const struct sock_frame* f, uint32_t nframes, uint32_t frames_done,
                                size_t reduce_esize) {
  if ((nframes != 0 && nframes != f->nframes) || frames_done >= f->nframes)
    return "frame count differs between frames of one message";
  if (reduce_esize && (f->offset % reduce_esize != 0 || f->len % reduce_esize != 0))
    return "a frame of a reduction splits an element";
  return NULL;
}

/* The header alone: returns 0 (and breaks c) if it cannot be a frame of
 * this connection. */
static int frame_sane(struct sock_conn* c, const struct sock_frame* f) {
  const char* why = sock_frame_problem(f, c->head);
  return why ? frame_bad(c, why) : 1;
}

/* The header against the receive posted for its message. */
static int frame_matches(struct sock_conn* c, const struct sock_frame* f, struct sock_msg* m) {
  const struct xfer* x = m->x;
  if (f->msg_bytes != x->bytes) {
    sock_conn_break(c, loomRemoteError,
                    "peer %d sent a message of %llu bytes where this rank expected %zu: the "
                    "ranks called different operations or counts",
                    c->base.peer, (unsigned long long)f->msg_bytes, x->bytes);
    return 0;
  }
  const char* why =
      sock_frame_mismatch(f, m->nframes, m->frames_done, x->reduce ? dtype_size(x->dtype) : 0);
  if (why) return frame_bad(c, why);
  if (m->nframes == 0) m->nframes = f->nframes;
  return 1;
}

/* Reduces the whole elements in s's bounce buffer into the destination. */
static void bounce_reduce(struct sock_stream* s, const struct xfer* x) {
  size_t es = dtype_size(x->dtype);
  size_t whole = s->bounce_have - s->bounce_have % es;
  if (whole == 0) return;
  size_t at = (size_t)s->in.offset + s->pay_got - s->bounce_have;
  x->reduce(x, at, s->bounce, whole);
  memmove(s->bounce, s->bounce + whole, s->bounce_have - whole);
  s->bounce_have -= whole;
}

/* The peer closed this stream between frames. */
static void stream_finished(struct sock_conn* c, struct sock_stream* s) {
  s->state = ST_FINISHED;
  for (int i = 0; i < c->nstreams; i++)
    if (c->streams[i].state != ST_FINISHED) return;
  sock_conn_peer_gone(c,
                      "peer %d closed its socket connection (%s lane): it aborted, failed or "
                      "was destroyed",
                      c->base.peer, sock_lane_name(c->base.lane));
}

/* One recv of what the socket has: up to `want` bytes straight to `to`, then (with then_buf)
 * what follows into rbuf; only into rbuf when `to` is NULL or rbuf holds bytes already (they
 * come first: the stream's order). Returns 1 when bytes came (*direct of them to `to`), 0 when
 * none did: the socket is empty, it broke, or the peer closed it. So one recv takes a small frame
 * whole, and a large one's rest together with the next header. */
static int stream_read(struct sock_conn* c, struct sock_stream* s, char* to, size_t want,
                       int then_buf, size_t* direct) {
  *direct = 0;
  if (s->rbuf == NULL) {
    s->rbuf = malloc(SOCK_RBUF_BYTES);
    if (s->rbuf == NULL) {
      sock_conn_break(c, loomSystemError, "out of memory for a socket receive buffer");
      return 0;
    }
    memstat_add(c->base.comm, MEM_STAGING, c->base.peer, SOCK_RBUF_BYTES);
  }
  if (s->rb_at > 0) { /* the unread part to the front */
    memmove(s->rbuf, s->rbuf + s->rb_at, s->rb_end - s->rb_at);
    s->rb_end -= s->rb_at;
    s->rb_at = 0;
  }
  if (to == NULL || want == 0 || s->rb_end > 0) {
    to = NULL;
    want = 0;
    then_buf = 1;
  }
  size_t room = then_buf ? SOCK_RBUF_BYTES - s->rb_end : 0;
  struct iovec iov[2];
  int niov = 0;
  if (want > 0) iov[niov++] = (struct iovec){to, want};
  if (room > 0) iov[niov++] = (struct iovec){s->rbuf + s->rb_end, room};
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
  for (;;) {
    ssize_t n = recvmsg(s->fd, &mh, MSG_DONTWAIT);
    if (n > 0) {
      *direct = LOOM_MIN((size_t)n, want);
      s->rb_end += (size_t)n - *direct;
      /* A stream socket's recv takes everything queued up to the size asked, so a short one
       * emptied it (recv_header takes it from there). */
      if ((size_t)n < want + room) s->drained = 1;
      return 1;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      s->drained = 1;
      return 0;
    }
    if (n == 0 && s->in_got == 0 && s->rb_end == 0)
      stream_finished(c, s);
    else
      stream_lost(c, s, n < 0 ? errno : 0);
    return 0;
  }
}

/* Takes the current frame's payload, from rbuf first. Returns 1 when it is all in. */
static int recv_payload(struct sock_conn* c, struct sock_stream* s, const struct xfer* x) {
  size_t bounce_bytes = sock_bounce_bytes(c);
  if (x->reduce && s->bounce == NULL && s->in.len > 0) {
    s->bounce = malloc(bounce_bytes);
    if (s->bounce == NULL) {
      sock_conn_break(c, loomSystemError, "out of memory for a socket bounce buffer");
      return 0;
    }
    memstat_add(c->base.comm, MEM_STAGING, c->base.peer, bounce_bytes);
  }
  while (s->pay_got < s->in.len) {
    size_t left = s->in.len - s->pay_got;
    char* to = x->reduce ? s->bounce + s->bounce_have : (char*)x->dst + s->in.offset + s->pay_got;
    size_t want = x->reduce ? LOOM_MIN(bounce_bytes - s->bounce_have, left) : left;
    size_t n = LOOM_MIN(s->rb_end - s->rb_at, want);
    if (n > 0) {
      memcpy(to, s->rbuf + s->rb_at, n);
      s->rb_at += n;
    } else if (!stream_read(c, s, to, want, want == left /* rbuf gets only the next frame */, &n)) {
      return 0;
    }
    s->pay_got += n;
    if (x->reduce) {
      s->bounce_have += n;
      bounce_reduce(s, x);
    }
  }
  return 1;
}

/* Takes the header, from rbuf. Returns 1 when it is complete and sane. */
static int recv_header(struct sock_conn* c, struct sock_stream* s) {
  while (s->in_got < sizeof(s->in)) {
    if (s->rb_end - s->rb_at >= sizeof(s->in)) {
      memcpy(&s->in, s->rbuf + s->rb_at, sizeof(s->in));
      s->rb_at += sizeof(s->in);
      s->in_got = sizeof(s->in);
      break;
    }
    /* A read this round that came back short found the socket empty: no second look for
     * the next header (which would cost an EAGAIN after every small message). A payload's
     * reads do look: a large frame's bytes keep coming while they are read. */
    size_t direct;
    if (s->drained || !stream_read(c, s, NULL, 0, 1, &direct)) return 0;
  }
  return frame_sane(c, &s->in);
}

static void recv_progress(struct sock_conn* c, struct sock_stream* s) {
  for (;;) {
    if (!recv_header(c, s)) return;
    if (s->in.seq >= c->tail) return; /* not posted yet: resumes on the post */
    struct sock_msg* m = msg_at(c, s->in.seq);
    if (!s->in_checked) {
      if (!frame_matches(c, &s->in, m)) return;
      s->in_checked = 1;
    }
    if (!recv_payload(c, s, m->x)) return;
    m->frames_done++;
    m->bytes_done += s->in.len;
    if (m->frames_done == m->nframes && m->bytes_done != m->x->bytes) {
      frame_bad(c, "the frames of a message do not add up to its size");
      return;
    }
    s->in_got = 0;
    s->in_checked = 0;
    s->pay_got = 0;
  }
}

void sock_stream_progress(struct sock_conn* c) {
  for (int i = 0; i < c->nstreams; i++) {
    struct sock_stream* s = &c->streams[i];
    if (s->state != ST_UP) continue;
    if (c->base.is_send) {
      send_progress(c, s);
    } else {
      s->drained = 0;
      recv_progress(c, s);
    }
    if (atomic_load_explicit(&c->broken, memory_order_relaxed)) return;
  }
  sock_conn_retire(c);
}
