/* shmfile.h - shared memory between processes of one host that nothing
 * outlives.
 *
 * An object is an unnamed file in /dev/shm (O_TMPFILE): it exists while a
 * process holds it open or mapped, and not a moment longer, so a rank that
 * is killed, or exits without loomCommDestroy, leaves nothing behind. Its
 * creator keeps the descriptor open while a peer may still need to open it,
 * and a peer reaches it through /proc/<pid>/fd/<fd> (the kernel allows that
 * to processes of the same user that may inspect each other, as it allows
 * cross-memory attach). Where that is not possible (pid namespaces, other
 * users), the transport layer falls back to named POSIX segments
 * (tp_shm_named), made and opened here too (shmfile_named_*), so that every
 * object of the transport layer is made (create, size, map) and opened
 * (open, check the size, map) one way. One escape: shmfile_name gives an
 * object a name, for data a peer must still collect after its creator has
 * gone. */
#ifndef LOOM_TRANSPORT_SHMFILE_H
#define LOOM_TRANSPORT_SHMFILE_H

#include <stddef.h>

#include "transport/transport.h"

struct shm_file {
  int fd;    /* -1 once closed */
  void* map; /* NULL when not mapped */
  size_t bytes;
};

/* Creates an unnamed object of bytes (zeroed), mapped read-write, its
 * descriptor open. Returns 0 or an errno value (no /dev/shm, full, no
 * O_TMPFILE); logs nothing. */
int shmfile_make(size_t bytes, struct shm_file* out);
/* shmfile_make, with loomSystemError and one WARN naming what (for
 * messages) and the reason on failure. */
loomResult_t shmfile_create(struct loom_comm* comm, size_t bytes, const char* what,
                            struct shm_file* out);
/* Opens and maps, read-write, the object that process pid holds open as
 * descriptor fd. It must be a regular file of /dev/shm of min_bytes to
 * max_bytes bytes. Returns 0, or an errno value: ENOENT/ESRCH when the
 * process or its descriptor is gone, EACCES/EPERM when the kernel refuses,
 * EINVAL when it is not such an object. Never blocks. */
int shmfile_open_peer(int pid, int fd, size_t min_bytes, size_t max_bytes, void** map_out,
                      size_t* bytes_out);
/* Named mode. name starts with '/', as for shm_open; what names the object
 * for messages ("the FIFO", "peer 3's rank segment"). */
/* Creates name (it must not exist), sized to bytes (zeroed) and mapped
 * read-write; its descriptor is closed. On failure nothing is left, and
 * loomSystemError with one WARN naming what, the object, the step and the
 * reason. */
loomResult_t shmfile_named_create(struct loom_comm* comm, const char* name, size_t bytes,
                                  const char* what, void** map_out);
/* Opens name and maps it read-write whole, if it has min_bytes to max_bytes
 * bytes. Returns 0 or an errno value: ENOENT when it does not exist or is
 * smaller (its creator has not sized it yet), EINVAL when it is larger.
 * Logs nothing: whether a missing object is an error is the caller's call.
 * Never blocks. */
int shmfile_named_map(const char* name, size_t min_bytes, size_t max_bytes, void** map_out,
                      size_t* bytes_out);
/* shmfile_named_map of exactly bytes, which must be there: loomSystemError
 * and one WARN naming what, the object and the reason otherwise. */
loomResult_t shmfile_named_open(struct loom_comm* comm, const char* name, size_t bytes,
                                const char* what, void** map_out);
/* Gives the object behind fd the name /dev/shm/<name + 1> (name starts
 * with '/', as for shm_open): it then outlives this process until someone
 * unlinks it. Returns 0 or an errno value. */
int shmfile_name(int fd, const char* name);
/* Closes the descriptor (peers that opened it keep theirs). */
void shmfile_close_fd(struct shm_file* f);
/* Unmaps and closes. */
void shmfile_release(struct shm_file* f);
/* Removes named escape objects (loom-*-k...-p<pid>) whose receiving
 * process pid is gone: what a receiver killed before it collected them left.
 * Best effort; never fails. */
void shmfile_sweep(void);

#endif
