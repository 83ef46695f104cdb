/* A unique id as a program hands it over (128 bytes it may have mangled): checked as init
 * checks it, then turned into the address init would dial. */
#include "core/boot_internal.h"
#include "core/bootstrap.h"
#include "core/sock.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct boot_id id;
  if (size != sizeof(id)) return 0;
  memcpy(&id, data, sizeof(id));
  char why[256];
  if (boot_id_check(&id, why, sizeof(why)) != 0) return 0;
  union sock_addr a;
  boot_id_addr(&id, &a);
  char text[128];
  sock_addr_str(&a, text, sizeof(text));
  return 0;
}
