// [3]'s second reference: libcurl's own ceiling on this machine. The same POSTs h2load sends (body and headers
// of the transport's sizes) over `connections` HTTP/2 connections with `streams` in flight on each, from C,
// easy handles reused: the fastest the library the APNs and FCM transports are built on can go here, with no
// Swift, no database and no dispatcher. Prints one JSON line.
// Usage: curl-reference URL CA-FILE REQUESTS CONNECTIONS STREAMS
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t discard(char *data, size_t size, size_t count, void *user) {
  (void)data;
  (void)user;
  return size * count;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: curl-reference URL CA-FILE REQUESTS CONNECTIONS STREAMS\n");
    return 2;
  }
  const char *url = argv[1], *ca = argv[2];
  int total = atoi(argv[3]), connections = atoi(argv[4]), window = connections * atoi(argv[5]);
  if (total < 1 || connections < 1 || window < 1) return 2;
  const char *body = "{\"aps\":{\"alert\":{\"title\":\"Soulacy\",\"body\":\"An agent result is ready to review.\"},"
                     "\"category\":\"SOULACY_DELIVERY\",\"thread-id\":\"bench\",\"mutable-content\":1},"
                     "\"delivery_id\":\"dlv_0123456789abcdef01234567\",\"agent_id\":\"bench\"}";
  char authorization[300] = "authorization: bearer ";
  size_t prefix = strlen(authorization);
  memset(authorization + prefix, 'e', 200);
  authorization[prefix + 200] = 0;
  struct curl_slist *headers = NULL;
  const char *fixed[] = {"apns-topic: dev.soulacy.ios", "apns-push-type: alert", "apns-priority: 10", "apns-expiration: 1767225600",
                         "apns-id: 6f1f3c1e-0000-4000-8000-000000000000", authorization};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) headers = curl_slist_append(headers, fixed[i]);

  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM *multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)connections);
  CURL **handles = calloc((size_t)window, sizeof *handles);
  for (int i = 0; i < window; i++) {
    handles[i] = curl_easy_init();
    curl_easy_setopt(handles[i], CURLOPT_URL, url);
    curl_easy_setopt(handles[i], CURLOPT_CAINFO, ca);
    curl_easy_setopt(handles[i], CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(handles[i], CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(handles[i], CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(handles[i], CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(handles[i], CURLOPT_WRITEFUNCTION, discard);
  }
  int running = 0, left = 0;
  CURLMsg *message;
  // The connections' TLS handshakes are not part of the rate: one request on each first.
  for (int i = 0; i < connections && i < window; i++) {
    curl_easy_setopt(handles[i], CURLOPT_PIPEWAIT, 0L);
    curl_multi_add_handle(multi, handles[i]);
  }
  do {
    curl_multi_perform(multi, &running);
    if (running) curl_multi_poll(multi, NULL, 0, 100, NULL);
  } while (running);
  while ((message = curl_multi_info_read(multi, &left))) {
    curl_multi_remove_handle(multi, message->easy_handle);
    curl_easy_setopt(message->easy_handle, CURLOPT_PIPEWAIT, 1L);
  }

  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int started = 0, done = 0, ok = 0;
  for (; started < window && started < total; started++) curl_multi_add_handle(multi, handles[started]);
  while (done < total) {
    curl_multi_perform(multi, &running);
    while ((message = curl_multi_info_read(multi, &left))) {
      if (message->msg != CURLMSG_DONE) continue;
      long status = 0;
      curl_easy_getinfo(message->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      if (message->data.result == CURLE_OK && status == 200) ok++;
      done++;
      curl_multi_remove_handle(multi, message->easy_handle);
      if (started < total) {
        curl_multi_add_handle(multi, message->easy_handle);
        started++;
      }
    }
    if (done < total) curl_multi_poll(multi, NULL, 0, 100, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
  printf("{\"count\": %d, \"ok\": %d, \"connections\": %d, \"seconds\": %.4f, \"per_second\": %.1f}\n", total, ok, connections, seconds,
         total / seconds);
  for (int i = 0; i < window; i++) curl_easy_cleanup(handles[i]);
  free(handles);
  curl_multi_cleanup(multi);
  curl_slist_free_all(headers);
  curl_global_cleanup();
  return ok == total ? 0 : 1;
}
