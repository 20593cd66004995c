// Fixed-arity entry points for libcurl's variadic setters, and public-key pinning through OpenSSL.
#ifndef SOULACY_CCURLSHIMS_H
#define SOULACY_CCURLSHIMS_H
#include <stdint.h>
#include <stddef.h>
#include <curl/curl.h>

CURLcode soulacy_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode soulacy_curl_setopt_ptr(CURL *handle, CURLoption option, const void *value);
CURLcode soulacy_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
CURLcode soulacy_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLMcode soulacy_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
CURLSHcode soulacy_curl_share_setopt_long(CURLSH *handle, CURLSHoption option, long value);

typedef size_t (*soulacy_curl_data_fn)(char *data, size_t size, size_t count, void *userdata);
/* Installs the body and header callbacks with one user-data pointer. */
CURLcode soulacy_curl_set_callbacks(CURL *handle, soulacy_curl_data_fn body, soulacy_curl_data_fn header, void *userdata);
/* Installs the upload callback (SMTP's message, an IMAP APPEND) with its user-data pointer. */
CURLcode soulacy_curl_set_read_callback(CURL *handle, soulacy_curl_data_fn read, void *userdata);
/* The next finished transfer of a multi handle: returns 1 and fills easy/result, or 0 when there is none. */
int soulacy_curl_multi_next_done(CURLM *multi, CURL **easy, CURLcode *result);

/* Trust exactly one key: the handshake fails unless the server's leaf public key, in the bytes iOS'
   SecKeyCopyExternalRepresentation gives (EC: 0x04||X||Y, RSA: PKCS#1 DER), hashes (SHA-256) to `pin`
   (32 bytes, kept by the caller for the transfer's life), as the original Soulacy app checks. No CA is consulted. */
CURLcode soulacy_curl_pin_public_key(CURL *handle, const unsigned char *pin);

#endif
