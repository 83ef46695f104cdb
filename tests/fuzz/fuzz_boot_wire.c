/* The bootstrap's messages as they arrive from the network (src/core/bootstrap.h): a header,
 * a rank's hello to rank 0, a link hello, and the peer table (its length checked first, as
 * the bootstrap does). The first byte picks which; the rest is the message. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t pick = data[0] % 4;
  data++, size--;
  char why[256];
  switch (pick) {
    case 0: {
      struct boot_hdr h;
      if (size < sizeof(h)) return 0;
      memcpy(&h, data, sizeof(h));
      boot_hdr_check(&h, 1u << 20, why, sizeof(why));
      break;
    }
    case 1: {
      struct boot_hello h;
      memset(&h, 0, sizeof(h));
      memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
      boot_hello_check(&h, size, 0x1234, 8, why, sizeof(why));
      break;
    }
    case 2: {
      struct boot_link_hello h;
      memset(&h, 0, sizeof(h));
      memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
      boot_link_hello_check(&h, size, 0x1234, 0xabcd, 8, 3, why, sizeof(why));
      break;
    }
    default: {
      int nranks = 1 + (size ? data[0] % 16 : 0);
      if (size < 1 + boot_table_len(nranks)) return 0;
      uint64_t hash;
      struct peer_info peers[16];
      struct boot_addr addrs[16];
      boot_table_parse(data + 1, nranks, &hash, peers, addrs);
      break;
    }
  }
  return 0;
}
