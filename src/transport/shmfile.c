/* shmfile.c - shared-memory objects, unnamed and named (see shmfile.h). */
#include "transport/shmfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checks.h"

#define SHM_DIR "/dev/shm"

/* The two halves every object goes through, whoever made it. */

/* A new object behind fd: sized to bytes (zeroed) and mapped read-write.
 * 0 or an errno value; *step_out names the step that failed. */
static int size_and_map(int fd, size_t bytes, void** map_out, const char** step_out) {
  *step_out = "ftruncate";
  if (ftruncate(fd, (off_t)bytes) != 0) return errno;
  *step_out = "mmap";
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno;
  *map_out = p;
  return 0;
}

/* An existing object behind fd, of min_bytes to max_bytes (and, when
 * on_shm_only, a regular file of /dev/shm), mapped read-write whole. 0 or
 * an errno value: ENOENT when it is smaller (its creator has not sized it
 * yet), EINVAL when larger or not such a file. */
static int check_and_map(int fd, size_t min_bytes, size_t max_bytes, int on_shm_only,
                         void** map_out, size_t* bytes_out);

int shmfile_make(size_t bytes, struct shm_file* out) {
  out->fd = -1;
  out->map = NULL;
  out->bytes = bytes;
  int fd = open(SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  const char* step;
  int e = size_and_map(fd, bytes, &out->map, &step);
  if (e) {
    close(fd);
    return e;
  }
  out->fd = fd;
  return 0;
}

loomResult_t shmfile_create(struct loom_comm* comm, size_t bytes, const char* what,
                            struct shm_file* out) {
  int e = shmfile_make(bytes, out);
  if (e == 0) return loomSuccess;
  return err_set_sub(comm, SUB_SHM, loomSystemError,
                     "cannot make %s of %zu bytes, an unnamed file in " SHM_DIR ": %s%s", what,
                     bytes, strerror(e), e == ENOSPC ? " (is " SHM_DIR " full?)" : "");
}

/* 1 when st is a file of the file system that holds /dev/shm. */
static int on_shm(const struct stat* st) {
  static dev_t shm_dev;
  static int known;
  if (!__atomic_load_n(&known, __ATOMIC_ACQUIRE)) {
    struct stat d;
    if (stat(SHM_DIR, &d) != 0) return 0;
    __atomic_store_n(&shm_dev, d.st_dev, __ATOMIC_RELAXED);
    __atomic_store_n(&known, 1, __ATOMIC_RELEASE);
  }
  return st->st_dev == __atomic_load_n(&shm_dev, __ATOMIC_RELAXED);
}

static int check_and_map(int fd, size_t min_bytes, size_t max_bytes, int on_shm_only,
                         void** map_out, size_t* bytes_out) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  if (on_shm_only && (!S_ISREG(st.st_mode) || !on_shm(&st))) return EINVAL;
  if ((size_t)st.st_size < min_bytes) return ENOENT;
  if ((size_t)st.st_size > max_bytes) return EINVAL;
  void* p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno;
  *map_out = p;
  *bytes_out = (size_t)st.st_size;
  return 0;
}

int shmfile_open_peer(int pid, int fd, size_t min_bytes, size_t max_bytes, void** map_out,
                      size_t* bytes_out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  /* O_NONBLOCK and O_NOCTTY: should the number now name something else (a
   * pipe, a terminal), opening it must neither block nor adopt it. */
  int f = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f < 0) return errno;
  int e = check_and_map(f, min_bytes, max_bytes, 1, map_out, bytes_out);
  close(f);
  /* The creator sized it before publishing the number: smaller is not it. */
  return e == ENOENT ? EINVAL : e;
}

/* ---- Named objects ------------------------------------------------------------ */

loomResult_t shmfile_named_create(struct loom_comm* comm, const char* name, size_t bytes,
                                  const char* what, void** map_out) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  const char* step = "shm_open";
  int e = fd < 0 ? errno : size_and_map(fd, bytes, map_out, &step);
  if (fd >= 0) close(fd); /* the mapping keeps the object */
  if (e == 0) return loomSuccess;
  if (fd >= 0) shm_unlink(name); /* made here: nobody else may have it yet */
  return err_set_sub(comm, SUB_SHM, loomSystemError,
                     "cannot make %s " SHM_DIR "%s of %zu bytes: %s failed: %s%s", what, name,
                     bytes, step, strerror(e),
                     e == ENOSPC || e == ENOMEM ? " (is " SHM_DIR " full?)" : "");
}

int shmfile_named_map(const char* name, size_t min_bytes, size_t max_bytes, void** map_out,
                      size_t* bytes_out) {
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return errno;
  int e = check_and_map(fd, min_bytes, max_bytes, 0, map_out, bytes_out);
  close(fd);
  return e;
}

loomResult_t shmfile_named_open(struct loom_comm* comm, const char* name, size_t bytes,
                                const char* what, void** map_out) {
  size_t got = 0;
  int e = shmfile_named_map(name, bytes, bytes, map_out, &got);
  if (e == 0) return loomSuccess;
  const char* why = e == ENOENT   ? "missing, or smaller than it must be"
                    : e == EINVAL ? "larger than it must be"
                                  : strerror(e);
  return err_set_sub(comm, SUB_SHM, loomSystemError, "cannot open %s " SHM_DIR "%s (%zu bytes): %s",
                     what, name, bytes, why);
}

int shmfile_name(int fd, const char* name) {
  char from[64], to[128];
  snprintf(from, sizeof(from), "/proc/self/fd/%d", fd);
  snprintf(to, sizeof(to), SHM_DIR "%s", name);
  return linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

void shmfile_close_fd(struct shm_file* f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

void shmfile_release(struct shm_file* f) {
  if (f->map) munmap(f->map, f->bytes);
  f->map = NULL;
  shmfile_close_fd(f);
}

void shmfile_sweep(void) {
  DIR* d = opendir(SHM_DIR);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    const char* n = e->d_name;
    if (strncmp(n, "loom-", 5) != 0 || !strstr(n, "-k")) continue;
    const char* p = strrchr(n, '-');
    char* end = NULL;
    long pid = p && p[1] == 'p' ? strtol(p + 2, &end, 10) : 0;
    if (pid <= 0 || !end || *end != '\0') continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char name[300];
    snprintf(name, sizeof(name), "/%s", n);
    if (shm_unlink(name) == 0)
      LOOM_INFO(SUB_SHM, "removed %s: its receiver (pid %ld) is gone", name, pid);
  }
  closedir(d);
}
