#include <stddef.h>
#include <stdint.h>
/* Runs libFuzzer's driver with a harness. SwiftPM gives each executable its own entry symbol, so the
   harness calls this from there instead of letting libFuzzer supply main. */
int soulacy_fuzz_main(int argc, char **argv, int (*harness)(const uint8_t *data, size_t size));
