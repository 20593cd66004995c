#define _GNU_SOURCE
#include "CHTTPServerShims.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <ctype.h>
#include <stdlib.h>
#include <unistd.h>

void soulacy_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t length) {
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return;
    const struct sockaddr *sa = info->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buffer, (socklen_t)length);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buffer, (socklen_t)length);
}

/* %HH decoding as MHD's own, except that %00 becomes the byte 0xFF: a NUL would silently cut the path or
   value short, while 0xFF is never valid UTF-8, so the request is refused as malformed instead. */
static size_t soulacy_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls; (void)c;
    char *out = s;
    const char *in = s;
    while (*in) {
        if (in[0] == '%' && isxdigit((unsigned char)in[1]) && isxdigit((unsigned char)in[2])) {
            char hex[3] = { in[1], in[2], 0 };
            unsigned long byte = strtoul(hex, NULL, 16);
            *out++ = byte == 0 ? (char)0xFF : (char)byte;
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = 0;
    return (size_t)(out - s);
}

int soulacy_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

void *soulacy_mhd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

struct soulacy_values_context { soulacy_mhd_value_fn fn; void *cls; };
static enum MHD_Result soulacy_values_iterator(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                               const char *value, size_t value_size) {
    (void)kind;
    struct soulacy_values_context *context = cls;
    return context->fn(context->cls, key, key_size, value, value_size) ? MHD_YES : MHD_NO;
}
void soulacy_mhd_values(struct MHD_Connection *connection, enum MHD_ValueKind kind, soulacy_mhd_value_fn fn, void *cls) {
    struct soulacy_values_context context = { fn, cls };
    MHD_get_connection_values_n(connection, kind, soulacy_values_iterator, &context);
}

struct MHD_Daemon *soulacy_mhd_start(unsigned int flags, uint16_t port,
                                     MHD_AccessHandlerCallback handler, void *handler_cls,
                                     MHD_RequestCompletedCallback completed, void *completed_cls,
                                     const struct soulacy_mhd_options *o) {
    struct MHD_OptionItem items[16];
    int n = 0;
    items[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls };
    if (o->thread_pool_size > 1)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_THREAD_POOL_SIZE, o->thread_pool_size, NULL };
    if (o->connection_limit > 0)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_LIMIT, o->connection_limit, NULL };
    items[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_TIMEOUT, o->connection_timeout_seconds, NULL };
    if (o->connection_memory_limit > 0)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)o->connection_memory_limit, NULL };
    if (o->bind_address)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_SOCK_ADDR, 0, (void *)o->bind_address };
    if (o->https_key_pem && o->https_cert_pem) {
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)o->https_key_pem };
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)o->https_cert_pem };
    }
    if (o->per_ip_connection_limit > 0)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->per_ip_connection_limit, NULL };
    items[n++] = (struct MHD_OptionItem){ MHD_OPTION_STRICT_FOR_CLIENT, o->strict_for_client, NULL };
    items[n++] = (struct MHD_OptionItem){ MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)soulacy_unescape, NULL };
    if (o->notify_connection)
        items[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)o->notify_connection, o->notify_connection_cls };
    items[n++] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
    return MHD_start_daemon(flags, port, o->accept_policy, o->accept_policy_cls, handler, handler_cls,
                            MHD_OPTION_ARRAY, items, MHD_OPTION_END);
}

uint16_t soulacy_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/* ---- One port for TLS and plain HTTP (the original gateway's auto-TLS listener) ---- */
#include <poll.h>
#include <time.h>
#include <errno.h>

int soulacy_listen_socket(const struct sockaddr *address, socklen_t length, int backlog) {
    int fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (address->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(fd, address, length) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

uint16_t soulacy_socket_port(int fd) {
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    if (getsockname(fd, (struct sockaddr *)&address, &length) != 0) return 0;
    if (address.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&address)->sin_port);
    if (address.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&address)->sin6_port);
    return 0;
}

struct soulacy_pending { int fd; struct sockaddr_storage address; socklen_t length; struct timespec since; };

static int soulacy_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return 0;
}

static long soulacy_elapsed_ms(const struct timespec *since, const struct timespec *now) {
    return (now->tv_sec - since->tv_sec) * 1000 + (now->tv_nsec - since->tv_nsec) / 1000000;
}

void soulacy_split_listener_run(int listen_fd, int stop_fd, struct MHD_Daemon *tls, struct MHD_Daemon *plain,
                                int first_byte_timeout_ms, int pending_limit, int per_address_limit) {
    struct soulacy_pending *pending = calloc((size_t)pending_limit, sizeof *pending);
    struct pollfd *polls = calloc((size_t)pending_limit + 2, sizeof *polls);
    if (!pending || !polls) { free(pending); free(polls); return; }
    int count = 0;
    for (;;) {
        polls[0] = (struct pollfd){ .fd = stop_fd, .events = POLLIN };
        polls[1] = (struct pollfd){ .fd = count < pending_limit ? listen_fd : -1, .events = POLLIN };
        for (int i = 0; i < count; i++) polls[i + 2] = (struct pollfd){ .fd = pending[i].fd, .events = POLLIN };
        int ready = poll(polls, (nfds_t)count + 2, 500);
        if (ready < 0 && errno != EINTR) break;
        if (polls[0].revents) break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* Waiting connections: the first byte picks the daemon (0x16 opens a TLS handshake); it stays in the
           socket (MSG_PEEK), so the daemon reads the whole stream. Silent too long, closed, or failed: dropped. */
        for (int i = count - 1; i >= 0; i--) {
            int drop = 0, hand = 0;
            unsigned char first = 0;
            if (polls[i + 2].revents) {
                ssize_t n = recv(pending[i].fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
                if (n == 1) hand = 1;
                else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) drop = 1;
            }
            if (!hand && !drop && soulacy_elapsed_ms(&pending[i].since, &now) >= first_byte_timeout_ms) drop = 1;
            if (hand) {
                /* MHD closes the socket itself when it cannot take it (limits reached). */
                MHD_add_connection(first == 0x16 ? tls : plain, pending[i].fd, (const struct sockaddr *)&pending[i].address, pending[i].length);
            } else if (drop) {
                close(pending[i].fd);
            }
            if (hand || drop) pending[i] = pending[--count];
        }
        if (polls[1].revents) {
            while (count < pending_limit) {
                struct soulacy_pending next = { .length = sizeof next.address };
                next.fd = accept4(listen_fd, (struct sockaddr *)&next.address, &next.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (next.fd < 0) break;
                int same = 0;
                for (int i = 0; i < count; i++) same += soulacy_same_host(&pending[i].address, &next.address);
                if (same >= per_address_limit) { close(next.fd); continue; }
                next.since = now;
                pending[count++] = next;
            }
        }
    }
    for (int i = 0; i < count; i++) close(pending[i].fd);
    free(pending);
    free(polls);
}
