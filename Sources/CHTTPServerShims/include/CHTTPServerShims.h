// libmicrohttpd entry points Swift cannot call directly (variadic MHD_start_daemon, values with their lengths),
// and the accept loop that serves TLS and plain HTTP on one port.
#ifndef SOULACY_CHTTPSERVERSHIMS_H
#define SOULACY_CHTTPSERVERSHIMS_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

struct soulacy_mhd_options {
    unsigned int thread_pool_size;
    unsigned int connection_limit;
    unsigned int connection_timeout_seconds;
    size_t connection_memory_limit;
    const struct sockaddr *bind_address;     /* NULL: any address on `port` */
    const char *https_key_pem;               /* NULL: plain HTTP */
    const char *https_cert_pem;
    unsigned int per_ip_connection_limit;    /* 0: none */
    int strict_for_client;                   /* MHD_OPTION_STRICT_FOR_CLIENT */
    MHD_NotifyConnectionCallback notify_connection;  /* NULL: none */
    void *notify_connection_cls;
    MHD_AcceptPolicyCallback accept_policy;  /* NULL: accept all */
    void *accept_policy_cls;
};

/* The socket of a connection (for shutting down one that takes too long to send its request). */
int soulacy_mhd_connection_fd(struct MHD_Connection *connection);

/* What the connection-notify callback stored in the connection's socket context (NULL when nothing). */
void *soulacy_mhd_socket_context(struct MHD_Connection *connection);

/* Every value of one kind with its length, so NUL bytes inside a name or value can be seen. */
typedef int (*soulacy_mhd_value_fn)(void *cls, const char *key, size_t key_size, const char *value, size_t value_size);
void soulacy_mhd_values(struct MHD_Connection *connection, enum MHD_ValueKind kind, soulacy_mhd_value_fn fn, void *cls);

struct MHD_Daemon *soulacy_mhd_start(unsigned int flags, uint16_t port,
                                     MHD_AccessHandlerCallback handler, void *handler_cls,
                                     MHD_RequestCompletedCallback completed, void *completed_cls,
                                     const struct soulacy_mhd_options *options);

/* The client's address as text ("127.0.0.1", "::1"); writes an empty string when unknown. */
void soulacy_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t length);

/* A listening TCP socket (close-on-exec, non-blocking, SO_REUSEADDR), or -1 with errno. */
int soulacy_listen_socket(const struct sockaddr *address, socklen_t length, int backlog);
/* The local port of a socket, 0 when unknown. */
uint16_t soulacy_socket_port(int fd);
/* Accepts on `listen_fd` until `stop_fd` is readable, handing each connection to `tls` when its first byte
   opens a TLS handshake (0x16) and to `plain` otherwise; both daemons run with MHD_USE_NO_LISTEN_SOCKET.
   A connection silent for `first_byte_timeout_ms` is closed; at most `pending_limit` wait for their first byte,
   `per_address_limit` from one address. */
void soulacy_split_listener_run(int listen_fd, int stop_fd, struct MHD_Daemon *tls, struct MHD_Daemon *plain,
                                int first_byte_timeout_ms, int pending_limit, int per_address_limit);

/* The port the daemon is bound to (useful when started on port 0). */
uint16_t soulacy_mhd_bound_port(struct MHD_Daemon *daemon);

#endif
