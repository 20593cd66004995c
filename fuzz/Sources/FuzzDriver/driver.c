#include "FuzzDriver.h"
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*cb)(const uint8_t *data, size_t size));
int soulacy_fuzz_main(int argc, char **argv, int (*harness)(const uint8_t *data, size_t size)) {
    return LLVMFuzzerRunDriver(&argc, &argv, harness);
}
