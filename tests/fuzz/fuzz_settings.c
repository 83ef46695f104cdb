/* Every LOOM_* value as a user may write it: the first byte picks a row of the table (or
 * LOOM_ALGO's and LOOM_PROTO's names, or a LOOM_ROOT address, whose syntax is checked without
 * resolving it); the rest is the text. */
#include "core/params.h"
#include "core/sock.h"
#include "fuzz.h"
#include "topo/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int n;
  params_table(&n);
  int pick = data[0] % (n + 3);
  char text[4096], why[256];
  fuzz_text(data + 1, size - 1, text, sizeof(text));
  if (pick < n) {
    params_try(pick, text, why, sizeof(why));
  } else if (pick == n) {
    tune_algo_check(text);
  } else if (pick == n + 1) {
    tune_proto_check(text);
  } else {
    char host[256];
    int port, bracketed;
    sock_hostport_split(text, host, sizeof(host), &port, &bracketed); /* never resolves */
  }
  return 0;
}
