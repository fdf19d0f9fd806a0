/* tilec._hit: a cache shortcut read, checked and its watched tools stat'ed in one C call.
 *
 * The format is tilec/cache/format.py's (its module docstring); decode_shortcut, same_state and
 * unchanged there are the same checks in Python, used where this extension is not built, and
 * the tests hold the two to the same answers. In C because a cache hit in a fresh process is mostly the
 * interpreter running this code for the first time: here it is one call.
 *
 * The digest is BLAKE2b with a 32-byte output and no key (RFC 7693), as hashlib.blake2b(data,
 * digest_size=32), written from the RFC. Plain C and the limited API: a small module, cheap to
 * load, built for the stable ABI where the wheel is.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- BLAKE2b (RFC 7693, section 3) ---------------------------------------------------- */

static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t blake2b_sigma[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

static inline uint64_t rotr64(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const unsigned char *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* One unaligned load where the host's order is the digest's (x86-64, arm64): GCC does not
     merge the byte loop below into one, and the digest of a shortcut runs on every hit. */
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
#else
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v; /* little-endian whatever the host's order */
#endif
}

#define G(a, b, c, d, x, y)          \
  do {                               \
    v[a] = v[a] + v[b] + (x);        \
    v[d] = rotr64(v[d] ^ v[a], 32);  \
    v[c] = v[c] + v[d];              \
    v[b] = rotr64(v[b] ^ v[c], 24);  \
    v[a] = v[a] + v[b] + (y);        \
    v[d] = rotr64(v[d] ^ v[a], 16);  \
    v[c] = v[c] + v[d];              \
    v[b] = rotr64(v[b] ^ v[c], 63);  \
  } while (0)

/* One 128-byte block; `t` counts the message bytes so far (below 2^64 here), `last` the end. */
static void blake2b_compress(uint64_t h[8], const unsigned char block[128], uint64_t t, int last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
  for (int i = 0; i < 8; i++) {
    v[i] = h[i];
    v[i + 8] = blake2b_iv[i];
  }
  v[12] ^= t;
  if (last) v[14] = ~v[14];
  /* Written out round by round: with constant indices v and m stay in registers, which
     makes this about twice as fast as a loop over the rounds. */
#define ROUND(r)                                                              \
  do {                                                                        \
    G(0, 4, 8, 12, m[blake2b_sigma[r][0]], m[blake2b_sigma[r][1]]);           \
    G(1, 5, 9, 13, m[blake2b_sigma[r][2]], m[blake2b_sigma[r][3]]);           \
    G(2, 6, 10, 14, m[blake2b_sigma[r][4]], m[blake2b_sigma[r][5]]);          \
    G(3, 7, 11, 15, m[blake2b_sigma[r][6]], m[blake2b_sigma[r][7]]);          \
    G(0, 5, 10, 15, m[blake2b_sigma[r][8]], m[blake2b_sigma[r][9]]);          \
    G(1, 6, 11, 12, m[blake2b_sigma[r][10]], m[blake2b_sigma[r][11]]);        \
    G(2, 7, 8, 13, m[blake2b_sigma[r][12]], m[blake2b_sigma[r][13]]);         \
    G(3, 4, 9, 14, m[blake2b_sigma[r][14]], m[blake2b_sigma[r][15]]);         \
  } while (0)
  ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
  ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(0); ROUND(1); /* rounds 10, 11 */
#undef ROUND
  for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The 64 lowercase hex digits of BLAKE2b-256 of data[0, n), what cache.digest_bytes returns. */
static void blake2b_256_hex(const unsigned char *data, size_t n, char out[64]) {
  uint64_t h[8];
  memcpy(h, blake2b_iv, sizeof h);
  h[0] ^= 0x01010000ULL ^ 32; /* depth 1, fanout 1, no key, 32-byte digest */
  uint64_t t = 0;
  while (n > 128) { /* every block but the last, which may be full */
    t += 128;
    blake2b_compress(h, data, t, 0);
    data += 128;
    n -= 128;
  }
  unsigned char last[128] = {0};
  memcpy(last, data, n);
  t += n;
  blake2b_compress(h, last, t, 1);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    unsigned char byte = (unsigned char)(h[i / 8] >> (8 * (i % 8)));
    out[2 * i] = hex[byte >> 4];
    out[2 * i + 1] = hex[byte & 15];
  }
}

/* ---- the shortcut ---------------------------------------------------------------------- */

static const char MAGIC[] = "tilec-shortcut 4 ";
#define MAGIC_LEN (sizeof MAGIC - 1)
#define HEAD (MAGIC_LEN + 64)

/* The line starting at *at (up to, not including, its newline); *at moves past the newline.
   0 when there is no newline before end. */
static int next_line(const char **at, const char *end, const char **line, size_t *len) {
  const char *nl = memchr(*at, '\n', (size_t)(end - *at));
  if (nl == NULL) return 0;
  *line = *at;
  *len = (size_t)(nl - *at);
  *at = nl + 1;
  return 1;
}

/* A decimal number (an optional '-' then digits) that fills [p, p + n) exactly. */
static int parse_int(const char *p, size_t n, long long *out) {
  int neg = n > 0 && p[0] == '-';
  size_t i = (size_t)neg;
  if (i == n) return 0;
  long long v = 0;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    if (v > (LLONG_MAX - (p[i] - '0')) / 10) return 0; /* a time in ns has 19 digits */
    v = v * 10 + (p[i] - '0');
  }
  *out = neg ? -v : v;
  return 1;
}

static int is_hex64(const char *p, size_t n) {
  if (n != 64) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
  return 1;
}

/* Whether the watched path still has (mtime_ns, size); (-1, -1): still absent. */
static int same_state(const char *path, long long mtime, long long size) {
  struct stat st;
  if (stat(path, &st) != 0) return mtime == -1 && size == -1;
  long long ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  return ns == mtime && (long long)st.st_size == size;
}

/* Reads the whole file into a malloc'ed buffer; NULL with errno set where it cannot. */
static char *read_file(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) == 0 && st.st_size >= 0) {
    size_t want = (size_t)st.st_size, got = 0;
    buf = malloc(want + 1);
    while (buf != NULL && got < want) {
      ssize_t n = read(fd, buf + got, want - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break; /* a file cut while read is parsed as it is: the digest decides */
      got += (size_t)n;
    }
    *size = got;
  }
  int saved = errno;
  close(fd);
  errno = saved;
  return buf;
}

/* What the shortcut's bytes say; 0 where they are not a whole, unaltered shortcut. */
typedef struct {
  const char *key, *base, *rest, *entry, *head;
  size_t base_len, entry_len, head_len;
  long long hot;
  int trusted;
} parsed;

static int parse(const char *raw, size_t size, parsed *out) {
  if (size < HEAD + 1 || memcmp(raw, MAGIC, MAGIC_LEN) != 0 || raw[HEAD] != '\n') return 0;
  const char *at = raw + HEAD + 1, *end = raw + size, *line;
  size_t len;
  if (!next_line(&at, end, &line, &len) || !is_hex64(line, len)) return 0;
  out->key = line;
  if (!next_line(&at, end, &line, &len)) return 0;
  out->base = line;
  out->base_len = len;
  /* "<hot> <the entry's length> <digest of the entry after hot>" */
  if (!next_line(&at, end, &line, &len)) return 0;
  const char *sp1 = memchr(line, ' ', len);
  if (sp1 == NULL) return 0;
  const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(line + len - sp1 - 1));
  long long hot, length;
  if (sp2 == NULL || !parse_int(line, (size_t)(sp1 - line), &hot) ||
      !parse_int(sp1 + 1, (size_t)(sp2 - sp1 - 1), &length) ||
      (size_t)(line + len - sp2 - 1) != 64)
    return 0;
  out->rest = sp2 + 1;
  /* The head: "-", or six fields separated by tabs (decoded by head_tuple). */
  if (!next_line(&at, end, &line, &len)) return 0;
  size_t tabs = 0;
  for (size_t i = 0; i < len; i++) tabs += line[i] == '\t';
  if (!(len == 1 && line[0] == '-') && tabs != 5) return 0;
  out->head = line;
  out->head_len = len;
  const char *count_line;
  size_t count_len;
  if (!next_line(&at, end, &count_line, &count_len)) return 0;
  long long count = -1; /* "-": no watched paths, nothing vouched for */
  if (!(count_len == 1 && count_line[0] == '-') &&
      (!parse_int(count_line, count_len, &count) || count < 0))
    return 0;
  const char *watch = at;
  for (long long i = 0; i < count; i++) /* skip to the entry; stat'ed after the digest */
    if (!next_line(&at, end, &line, &len)) return 0;
  out->entry = at;
  out->entry_len = (size_t)(end - at);
  if (hot < 0 || (size_t)hot > out->entry_len || (size_t)length != out->entry_len) return 0;
  out->hot = hot;
  char digest[64];
  blake2b_256_hex((const unsigned char *)raw + HEAD + 1, (size_t)(at + hot - (raw + HEAD + 1)),
                  digest);
  if (memcmp(digest, raw + MAGIC_LEN, 64) != 0) return 0;
  /* Checked: now the watched paths, "<mtime_ns> <size> <path>" each. */
  out->trusted = count >= 0;
  char path[4096];
  for (long long i = 0; i < count && out->trusted; i++) {
    next_line(&watch, end, &line, &len);
    const char *a = memchr(line, ' ', len);
    const char *b = a ? memchr(a + 1, ' ', (size_t)(line + len - a - 1)) : NULL;
    long long mtime, fsize;
    size_t plen = b ? (size_t)(line + len - b - 1) : 0;
    if (b == NULL || !parse_int(line, (size_t)(a - line), &mtime) ||
        !parse_int(a + 1, (size_t)(b - a - 1), &fsize) || plen >= sizeof path ||
        memchr(b + 1, '\0', plen) != NULL)
      return 0;
    memcpy(path, b + 1, plen);
    path[plen] = '\0';
    out->trusted = same_state(path, mtime, fsize);
  }
  return 1;
}

/* A head's list field as a tuple of str: items separated by ',', none for an empty field
   (cache.decode_head). */
static PyObject *items_tuple(const char *p, size_t n) {
  Py_ssize_t count = 0;
  if (n > 0) {
    count = 1;
    for (size_t i = 0; i < n; i++) count += p[i] == ',';
  }
  PyObject *items = PyTuple_New(count);
  const char *end = p + n;
  for (Py_ssize_t i = 0; items != NULL && i < count; i++) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma != NULL ? comma : end;
    PyObject *item = PyUnicode_DecodeUTF8(p, stop - p, NULL);
    if (item == NULL || PyTuple_SetItem(items, i, item) != 0) Py_CLEAR(items);
    p = stop + 1;
  }
  return items;
}

/* The head line as cache.decode_head returns it: None for "-", else (first part, order,
   text stages, name, types, names); parse() has counted its five tabs. */
static PyObject *head_tuple(const char *p, size_t n) {
  if (n == 1 && p[0] == '-') Py_RETURN_NONE;
  PyObject *head = PyTuple_New(6);
  const char *end = p + n;
  for (Py_ssize_t i = 0; head != NULL && i < 6; i++) {
    const char *tab = memchr(p, '\t', (size_t)(end - p));
    const char *stop = tab != NULL ? tab : end;
    PyObject *field = (i == 0 || i == 3) ? PyUnicode_DecodeUTF8(p, stop - p, NULL)
                                         : items_tuple(p, (size_t)(stop - p));
    if (field == NULL || PyTuple_SetItem(head, i, field) != 0) Py_CLEAR(head);
    p = stop + 1;
  }
  return head;
}

/* read_shortcut(path) -> None (no file), False (damaged: the caller removes it), or
   (key, base, trusted, entry, hot, rest digest, head). */
static PyObject *read_shortcut(PyObject *self, PyObject *arg) {
  (void)self;
  PyObject *encoded = NULL;
  if (!PyUnicode_FSConverter(arg, &encoded)) return NULL;
  size_t size = 0;
  char *raw = read_file(PyBytes_AsString(encoded), &size);
  Py_DECREF(encoded);
  if (raw == NULL) {
    if (errno == ENOMEM) return PyErr_NoMemory();
    Py_RETURN_NONE; /* as Cache.get_shortcut: a shortcut that cannot be read is none */
  }
  parsed p;
  PyObject *result;
  if (!parse(raw, size, &p)) {
    result = Py_False;
    Py_INCREF(result);
  } else {
    PyObject *head = head_tuple(p.head, p.head_len);
    result = head == NULL ? NULL
                          : Py_BuildValue("(s#s#Ny#Ly#N)", p.key, (Py_ssize_t)64, p.base,
                                          (Py_ssize_t)p.base_len, PyBool_FromLong(p.trusted),
                                          p.entry, (Py_ssize_t)p.entry_len, p.hot, p.rest,
                                          (Py_ssize_t)64, head);
    if (result == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
      PyErr_Clear(); /* a base or head that is not text: damaged, as decode_shortcut says */
      result = Py_False;
      Py_INCREF(result);
    }
  }
  free(raw);
  return result;
}

/* blake2b_hex(bytes-like) -> the digest as cache.digest_bytes returns it. */
static PyObject *blake2b_hex(PyObject *self, PyObject *arg) {
  (void)self;
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
  char out[64];
  blake2b_256_hex((const unsigned char *)view.buf, (size_t)view.len, out);
  PyBuffer_Release(&view);
  return PyBytes_FromStringAndSize(out, 64);
}

/* One [path, [mtime_ns, size]] of a watch list: 1 unchanged, 0 changed, -1 not such an item
 * (or a path that is no UTF-8 text: Python answers for those). */
static int item_unchanged(PyObject *item) {
  PyObject *path = NULL, *state = NULL, *m = NULL, *z = NULL;
  int answer = -1;
  if (PySequence_Check(item) && PySequence_Size(item) == 2 &&
      (path = PySequence_GetItem(item, 0)) && (state = PySequence_GetItem(item, 1)) &&
      PyUnicode_Check(path) && PySequence_Check(state) && PySequence_Size(state) == 2 &&
      (m = PySequence_GetItem(state, 0)) && (z = PySequence_GetItem(state, 1)) &&
      PyLong_Check(m) && PyLong_Check(z)) {
    Py_ssize_t n = 0;
    const char *text = PyUnicode_AsUTF8AndSize(path, &n);
    long long mtime = PyLong_AsLongLong(m), size = PyLong_AsLongLong(z);
    if (text != NULL && (size_t)n == strlen(text) && !PyErr_Occurred())
      answer = same_state(text, mtime, size);
  }
  Py_XDECREF(path);
  Py_XDECREF(state);
  Py_XDECREF(m);
  Py_XDECREF(z);
  PyErr_Clear();
  return answer;
}

/* unchanged(watch) -> True/False: whether every [path, [mtime_ns, size]] still has its state
 * (cache.unchanged, for the tools' identity a hit keyed by the IR checks); None where an item
 * is not one, for Python to answer. */
static PyObject *unchanged(PyObject *self, PyObject *watch) {
  (void)self;
  if (!PyList_Check(watch)) Py_RETURN_NONE;
  Py_ssize_t count = PyList_Size(watch);
  for (Py_ssize_t i = 0; i < count; i++) {
    int answer = item_unchanged(PyList_GetItem(watch, i)); /* borrowed */
    if (answer < 0) Py_RETURN_NONE;
    if (answer == 0) Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"read_shortcut", read_shortcut, METH_O, "Read and check a cache shortcut (tilec.cache)."},
    {"blake2b_hex", blake2b_hex, METH_O, "BLAKE2b-256 of bytes, as 64 hex digits (bytes)."},
    {"unchanged", unchanged, METH_O, "Whether watched paths keep their states (tilec.cache)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hit", NULL, 0, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hit(void) { return PyModule_Create(&module); }
