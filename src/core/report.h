/* report.h - tells the launcher why this process failed. loomrun (tools/loomrun.c) hands every
 * rank the write end of a datagram socket and names it in LOOM_RUN_FD. When a communicator
 * fails because a peer failed, the library sends one message there naming the peer's process,
 * and loomrun, which cannot learn from the kernel which of several dead ranks died first,
 * follows these messages to the rank whose failure caused the others. The message format is
 * shared with loomrun, which includes this header; the sender's pid is not in it, the kernel
 * tells loomrun (SCM_CREDENTIALS). */
#ifndef LOOM_CORE_REPORT_H
#define LOOM_CORE_REPORT_H

#include <stdint.h>

#define REPORT_MAGIC 0x4c4d4246U /* "LMBF" */
#define REPORT_VERSION 1

/* One datagram: "this process failed because process peer_pid failed". */
struct report_msg {
  uint32_t magic;   /* REPORT_MAGIC */
  uint32_t version; /* REPORT_VERSION */
  int32_t peer_pid; /* as the peer saw itself (getpid), which is loomrun's view on one host */
  int32_t pad;
};

/* Tells the launcher, if LOOM_RUN_FD names an AF_UNIX datagram socket, that this process failed
 * because process peer_pid failed. Does nothing for peer_pid <= 0 or this process itself.
 * Never blocks (MSG_DONTWAIT), never logs above INFO, ignores every error: a lost message only
 * costs the launcher its best guess. Thread safe; LOOM_RUN_FD is checked once per process. */
void report_blame(int peer_pid);

#endif
