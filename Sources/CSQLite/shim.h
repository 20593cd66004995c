#include <sqlite3.h>

// sqlite3_config is variadic, which Swift cannot call: fixed-arity wrappers for the settings we use.

// Turns off SQLite's memory statistics, which take a global mutex on every allocation. Only effective before
// the library initialises (the first connection); returns SQLITE_MISUSE after that.
static inline int soulacy_sqlite3_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
