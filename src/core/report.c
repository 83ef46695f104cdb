/* report.c - the library's end of loomrun's cause channel (report.h). */
#include "core/report.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/debug.h"
#include "core/params.h"

static pthread_once_t g_channel_once = PTHREAD_ONCE_INIT;
static int g_channel_fd = -1; /* written once, under g_channel_once */

/* 1 if fd is an AF_UNIX datagram socket. A program started some other way may have anything at
 * that number, or nothing: LOOM_RUN_FD could be a stale copy from another launcher. */
static int is_unix_dgram(int fd) {
  struct stat st;
  int domain = -1, type = -1;
  socklen_t dlen = sizeof(domain), tlen = sizeof(type);
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
         getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) == 0 && domain == AF_UNIX &&
         getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_DGRAM;
}

/* Runs once per process, under pthread_once. Never blocks. */
static void channel_find(void) {
  long long fd = params_get()->run_fd;
  if (fd < 0) return;
  if (!is_unix_dgram((int)fd)) {
    LOOM_INFO(SUB_INIT, "LOOM_RUN_FD=%lld is not a datagram socket; failures are not reported", fd);
    return;
  }
  g_channel_fd = (int)fd;
}

void report_blame(int peer_pid) {
  if (peer_pid <= 0 || peer_pid == (int)getpid()) return;
  pthread_once(&g_channel_once, channel_find);
  if (g_channel_fd < 0) return;
  struct report_msg msg = {.magic = REPORT_MAGIC, .version = REPORT_VERSION, .peer_pid = peer_pid};
  ssize_t n = send(g_channel_fd, &msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n != (ssize_t)sizeof(msg))
    LOOM_INFO(SUB_INIT, "could not tell the launcher that peer process %d failed: %s", peer_pid,
              n < 0 ? strerror(errno) : "short send");
  else
    LOOM_INFO(SUB_INIT, "told the launcher this process failed because process %d failed",
              peer_pid);
}
