/* The files a user points Loom at: a tuning file (LOOM_TUNING_FILE, or the calibration's
 * cache) and a topology file (LOOM_TOPO_FILE), read through a memory file holding the input.
 * The first byte picks. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "topo/topo.h"
#include "topo/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int fd = memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data + 1, size - 1) == (ssize_t)(size - 1)) {
    char path[64], why[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if (data[0] % 2) {
      struct tune_consts k;
      memset(&k, 0, sizeof(k));
      /* What was accepted feeds the model: every collective at a few sizes. */
      if (tune_consts_read(path, &k, data[0] % 4 == 1) == 0)
        for (int c = 0; c < TUNE_COLL_COUNT; c++)
          for (size_t b = 8; b <= (256u << 20); b <<= 5)
            (void)tune_pick_model(&k, (enum tune_coll)c, 4, b, 256u << 10,
                                  (1u << TUNE_ALGO_COUNT) - 1);
    } else {
      struct topo_facts f;
      memset(&f, 0, sizeof(f));
      topo_read(path, &f, why, sizeof(why));
    }
  }
  close(fd);
  return 0;
}
