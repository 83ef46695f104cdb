/* The socket transport's hellos and frame headers (src/transport/socket/socket.h), as a
 * stranger or a broken peer may send them: a hello at rank 3 of 8, a frame header by itself
 * and against a message in progress. The first byte picks which. */
#include "fuzz.h"
#include "transport/socket/socket.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t pick = data[0] % 2;
  data++, size--;
  char why[256];
  if (pick == 0) {
    struct sock_hello h;
    if (size < sizeof(h)) return 0;
    memcpy(&h, data, sizeof(h));
    sock_hello_problem(&h, 0x1234, 0xabcd, 8, 3, why, sizeof(why));
    return 0;
  }
  struct sock_frame f;
  if (size < sizeof(f) + 12) return 0;
  memcpy(&f, data, sizeof(f));
  uint64_t head;
  uint32_t done;
  memcpy(&head, data + sizeof(f), 8);
  memcpy(&done, data + sizeof(f) + 8, 4);
  if (!sock_frame_problem(&f, head)) sock_frame_mismatch(&f, done % 5, done / 5 % 7, done % 9);
  return 0;
}
