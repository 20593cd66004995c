#include <libpq-fe.h>

// libpq prints the server's notices (NOTICE, WARNING: "relation already exists, skipping") to stderr by default; a
// server library must not write to the process's stderr, so connections install this processor, which drops them.
static void soulacy_pq_ignore_notice(void *argument, const char *message) {
    (void)argument;
    (void)message;
}

static inline void soulacy_pq_silence_notices(PGconn *connection) {
    PQsetNoticeProcessor(connection, soulacy_pq_ignore_notice, NULL);
}
