#include "CCurlShims.h"
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>

/* OpenSSL frees its locks and tables in an atexit handler by default. A transfer still running on another thread
 * when the process exits (an IMAP check or a push the stop did not wait for) would then take a freed lock and crash
 * the exit. The first initialisation decides, so it is made here, before main, and the process leaves OpenSSL's
 * memory to the system as it does everything else's. */
__attribute__((constructor)) static void soulacy_openssl_without_atexit(void) {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

CURLcode soulacy_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
CURLcode soulacy_curl_setopt_ptr(CURL *h, CURLoption o, const void *v) { return curl_easy_setopt(h, o, v); }
CURLcode soulacy_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
CURLcode soulacy_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
CURLMcode soulacy_curl_multi_setopt_long(CURLM *h, CURLMoption o, long v) { return curl_multi_setopt(h, o, v); }
CURLSHcode soulacy_curl_share_setopt_long(CURLSH *h, CURLSHoption o, long v) { return curl_share_setopt(h, o, v); }

CURLcode soulacy_curl_set_callbacks(CURL *h, soulacy_curl_data_fn body, soulacy_curl_data_fn header, void *userdata) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_WRITEDATA, userdata);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_HEADERDATA, userdata);
    return rc;
}

CURLcode soulacy_curl_set_read_callback(CURL *h, soulacy_curl_data_fn read, void *userdata) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_READFUNCTION, read);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_READDATA, userdata);
    return rc;
}

int soulacy_curl_multi_next_done(CURLM *multi, CURL **easy, CURLcode *result) {
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE) {
            *easy = msg->easy_handle;
            *result = msg->data.result;
            return 1;
        }
    }
    return 0;
}

static int soulacy_pin_index = -1;

static int soulacy_pin_verify(int preverify, X509_STORE_CTX *store) {
    (void)preverify;
    if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;  /* only the leaf is checked, and only by its key's hash */
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    const unsigned char *expected = ssl ? SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), soulacy_pin_index) : NULL;
    X509 *leaf = X509_STORE_CTX_get_current_cert(store);
    if (!expected || !leaf) return 0;
    /* The original app's pin: the public key as iOS represents it (EC: 0x04||X||Y; RSA: PKCS#1 DER). */
    EVP_PKEY *key = X509_get0_pubkey(leaf);
    unsigned char *der = NULL;
    int length = key ? i2d_PublicKey(key, &der) : 0;
    if (length <= 0) return 0;
    unsigned char digest[32];
    unsigned int digest_length = 0;
    int ok = EVP_Digest(der, (size_t)length, digest, &digest_length, EVP_sha256(), NULL) == 1 && digest_length == 32
             && CRYPTO_memcmp(digest, expected, 32) == 0;
    OPENSSL_free(der);
    if (ok) X509_STORE_CTX_set_error(store, X509_V_OK);
    return ok;
}

static CURLcode soulacy_pin_ctx(CURL *curl, void *ssl_ctx, void *fingerprint) {
    (void)curl;
    SSL_CTX_set_ex_data((SSL_CTX *)ssl_ctx, soulacy_pin_index, fingerprint);
    SSL_CTX_set_verify((SSL_CTX *)ssl_ctx, SSL_VERIFY_PEER, soulacy_pin_verify);
    return CURLE_OK;
}

CURLcode soulacy_curl_pin_public_key(CURL *handle, const unsigned char *fingerprint) {
    if (soulacy_pin_index < 0) soulacy_pin_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    CURLcode rc = curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, 0L);
    if (rc == CURLE_OK) rc = curl_easy_setopt(handle, CURLOPT_SSL_CTX_FUNCTION, soulacy_pin_ctx);
    if (rc == CURLE_OK) rc = curl_easy_setopt(handle, CURLOPT_SSL_CTX_DATA, (void *)fingerprint);
    /* Connections are not shared with unpinned transfers: a fresh one is made and checked. */
    if (rc == CURLE_OK) rc = curl_easy_setopt(handle, CURLOPT_SSL_SESSIONID_CACHE, 0L);
    return rc;
}
