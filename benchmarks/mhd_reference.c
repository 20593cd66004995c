// Row 2's second reference: libmicrohttpd's own ceiling on this machine. A C server in the gateway's mode (an
// internal epoll thread pool of the same size) answering every GET with the same page from memory: no Swift, no
// routing, no authentication, no cache lookup, no access log. The gateway is built on this library, so this is
// as fast as its inbox GET can be here.
// Usage: mhd-reference PORT PAGE-FILE THREADS   (serves until killed)
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct MHD_Response *page;

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size, void **state) {
  (void)cls; (void)url; (void)version; (void)upload_data; (void)upload_data_size;
  if (strcmp(method, "GET") != 0) return MHD_NO;
  // The first call brings the headers alone; answering then makes libmicrohttpd close the connection (it cannot
  // know no body follows), so the page goes out on the second call, as the gateway's does.
  static int headers_read;
  if (*state == NULL) {
    *state = &headers_read;
    return MHD_YES;
  }
  return MHD_queue_response(connection, MHD_HTTP_OK, page);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: mhd-reference PORT PAGE-FILE THREADS\n");
    return 2;
  }
  FILE *file = fopen(argv[2], "rb");
  if (!file) return 2;
  static char body[1 << 20];
  size_t size = fread(body, 1, sizeof body, file);
  fclose(file);
  page = MHD_create_response_from_buffer(size, body, MHD_RESPMEM_PERSISTENT);
  MHD_add_response_header(page, "Content-Type", "application/json");
  struct MHD_Daemon *daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)atoi(argv[1]), NULL, NULL,
                                               answer, NULL, MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)atoi(argv[3]),
                                               MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
  if (!daemon) return 1;
  printf("listening\n");
  fflush(stdout);
  for (;;) pause();
}
