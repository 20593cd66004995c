// Fixed-arity entry points for variadic C functions, which Swift cannot call directly.
#ifndef SOULACY_CSHIMS_H
#define SOULACY_CSHIMS_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <curl/curl.h>

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

CURLcode soulacy_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode soulacy_curl_setopt_ptr(CURL *handle, CURLoption option, const void *value);
CURLcode soulacy_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
CURLcode soulacy_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLMcode soulacy_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
CURLSHcode soulacy_curl_share_setopt_long(CURLSH *handle, CURLSHoption option, long value);

typedef size_t (*soulacy_curl_data_fn)(char *data, size_t size, size_t count, void *userdata);
/* Installs the body and header callbacks with one user-data pointer. */
CURLcode soulacy_curl_set_callbacks(CURL *handle, soulacy_curl_data_fn body, soulacy_curl_data_fn header, void *userdata);
/* The next finished transfer of a multi handle: returns 1 and fills easy/result, or 0 when there is none. */
int soulacy_curl_multi_next_done(CURLM *multi, CURL **easy, CURLcode *result);

/* Trust exactly one key: the handshake fails unless the server's leaf public key, in the bytes iOS'
   SecKeyCopyExternalRepresentation gives (EC: 0x04||X||Y, RSA: PKCS#1 DER), hashes (SHA-256) to `pin`
   (32 bytes, kept by the caller for the transfer's life), as the original Soulacy app checks. No CA is consulted. */
CURLcode soulacy_curl_pin_public_key(CURL *handle, const unsigned char *pin);

#include <spawn.h>
/* pipe2(O_CLOEXEC) and posix_spawn_file_actions_addchdir_np are GNU extensions the Swift Glibc module hides. */
int soulacy_pipe_cloexec(int fds[2]);
int soulacy_spawn_add_chdir(posix_spawn_file_actions_t *actions, const char *path);

#endif
