/* kv_tier: see kv_tier.h. Each tier is an LRU list of keys over growable slot arrays with a
 * key -> slot table (linear probing, backward-shift deletion, as kv.c's): memory follows the
 * keys held, not the capacity (a 2 TB tier of a small model's blocks would be billions of
 * slots).
 *
 * The kinds' defaults, per device (each GPU has its own PCIe link and NIC):
 *   dram  read 50 GB/s, write 50 GB/s, 10 us, overlapped: pinned host memory over PCIe 5.0
 *         x16 (63 GB/s per direction on the bus; cudaMemcpyAsync of pinned buffers reaches
 *         about 50), loaded layer by layer under the forward pass as LMCache and vLLM's
 *         offloading connector do
 *   ssd   read 7 GB/s, write 3.5 GB/s, 100 us, not overlapped: one PCIe 4.0 NVMe drive's
 *         sequential datasheet rates (e.g. Samsung PM1733: 7.0 / 3.8 GB/s) and its ~100 us
 *         read latency; the block goes to host memory first, so the step waits for it
 *   pool  read 40 GB/s, write 40 GB/s, 20 us, not overlapped: a Mooncake-style store over
 *         one 400 Gb/s RDMA NIC per GPU (50 GB/s on the wire, ~80% of it in transfers)
 * Override any of them: dram:256GB:read=25GB/s,write=20GB/s,lat=5us,overlap=0. */
#include "policies/kv_tier.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    kv_tier_spec_t spec;
    kv_tier_stats_t st;
    uint64_t *key;         /* [cap] */
    int32_t *prev, *next;  /* [cap], -1 ends; head = least recently used */
    int32_t head, tail;
    int32_t *free_slots;   /* [cap] slots given back */
    int32_t n_free, used;  /* used: slots ever handed out (< cap) */
    int32_t cap;           /* slots allocated */
    int32_t *map;          /* [map_cap] slot ids, -1 empty */
    int32_t map_cap;
} tier_t;

struct kv_tiers {
    int n;
    tier_t t[KV_TIER_MAX];
};

static uint32_t slot_of(uint64_t key, int32_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key & (uint32_t)(cap - 1);
}

static int32_t lookup(const tier_t *t, uint64_t key) {
    if (!t->map) return -1;
    uint32_t mask = (uint32_t)t->map_cap - 1;
    for (uint32_t h = slot_of(key, t->map_cap); t->map[h] >= 0; h = (h + 1) & mask)
        if (t->key[t->map[h]] == key) return t->map[h];
    return -1;
}

static void map_put(tier_t *t, int32_t s) {
    uint32_t mask = (uint32_t)t->map_cap - 1, h = slot_of(t->key[s], t->map_cap);
    while (t->map[h] >= 0) h = (h + 1) & mask;
    t->map[h] = s;
}

static void map_remove(tier_t *t, int32_t s) {
    uint32_t mask = (uint32_t)t->map_cap - 1, h = slot_of(t->key[s], t->map_cap);
    while (t->map[h] != s) h = (h + 1) & mask;
    t->map[h] = -1;
    for (uint32_t j = (h + 1) & mask; t->map[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = slot_of(t->key[t->map[j]], t->map_cap);
        if (((j - home) & mask) >= ((j - h) & mask)) {
            t->map[h] = t->map[j];
            t->map[j] = -1;
            h = j;
        }
    }
}

static void unlink_slot(tier_t *t, int32_t s) {
    int32_t p = t->prev[s], n = t->next[s];
    if (p >= 0) t->next[p] = n;
    else t->head = n;
    if (n >= 0) t->prev[n] = p;
    else t->tail = p;
}

static void append(tier_t *t, int32_t s) {
    t->prev[s] = t->tail;
    t->next[s] = -1;
    if (t->tail >= 0) t->next[t->tail] = s;
    else t->head = s;
    t->tail = s;
}

/* Room for one more slot: doubles the arrays (and the table, kept at least twice the
 * slots) when every allocated slot is in use. 0, or -1 when out of memory. */
static int grow(tier_t *t) {
    if (t->n_free > 0 || t->used < t->cap) return 0;
    int64_t want = t->cap ? 2 * (int64_t)t->cap : 1024;
    if (want > t->spec.capacity_blocks) want = t->spec.capacity_blocks;
    if (want > INT32_MAX / 4) want = INT32_MAX / 4;
    if (want <= t->cap) return -1;
    uint64_t *k = realloc(t->key, sizeof *k * (size_t)want);
    if (k) t->key = k;
    int32_t *p = realloc(t->prev, sizeof *p * (size_t)want);
    if (p) t->prev = p;
    int32_t *n = realloc(t->next, sizeof *n * (size_t)want);
    if (n) t->next = n;
    int32_t *f = realloc(t->free_slots, sizeof *f * (size_t)want);
    if (f) t->free_slots = f;
    if (!k || !p || !n || !f) return -1;
    int32_t mc = t->map_cap ? t->map_cap : 16;
    while ((int64_t)mc < 2 * want) mc *= 2;
    if (mc != t->map_cap) {
        int32_t *m = malloc(sizeof *m * (size_t)mc);
        if (!m) return -1;
        for (int32_t i = 0; i < mc; i++) m[i] = -1;
        free(t->map);
        t->map = m;
        t->map_cap = mc;
        for (int32_t s = t->head; s >= 0; s = t->next[s]) map_put(t, s);
    }
    t->cap = (int32_t)want;
    return 0;
}

int kv_tier_check(const kv_tier_spec_t *specs, int n, char *err, size_t errlen) {
    if (n < 0 || n > KV_TIER_MAX) {
        snprintf(err, errlen, "%d KV tiers below HBM: at most %d", n, KV_TIER_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const kv_tier_spec_t *s = &specs[i];
        const char *why = NULL;
        if (s->capacity_blocks < 1) why = "a capacity of less than one block";
        else if (!(s->read_bps > 0) || !isfinite(s->read_bps)) why = "read bandwidth must be > 0";
        else if (!(s->write_bps > 0) || !isfinite(s->write_bps)) why = "write bandwidth must be > 0";
        else if (!(s->latency_s >= 0) || !isfinite(s->latency_s)) why = "latency must be >= 0";
        else if (i > 0 && !strcmp(specs[i - 1].kind, "pool") && strcmp(s->kind, "pool") != 0)
            why = "a local tier below the shared pool (the pool is the last tier)";
        else if (i > 0 && !strcmp(specs[i - 1].kind, "ssd") && !strcmp(s->kind, "dram"))
            why = "DRAM below SSD (tiers go from the fastest down)";
        if (why) {
            snprintf(err, errlen, "KV tier %d (%s): %s", i + 1, s->kind, why);
            return -1;
        }
    }
    return 0;
}

kv_tiers_t *kv_tiers_new(const kv_tier_spec_t *specs, int n) {
    if (kv_tier_check(specs, n, NULL, 0) != 0) return NULL;
    kv_tiers_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n = n;
    for (int i = 0; i < n; i++) {
        t->t[i].spec = specs[i];
        t->t[i].head = t->t[i].tail = -1;
    }
    return t;
}

void kv_tiers_free(kv_tiers_t *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->t[i].key);
        free(t->t[i].prev);
        free(t->t[i].next);
        free(t->t[i].free_slots);
        free(t->t[i].map);
    }
    free(t);
}

int kv_tiers_count(const kv_tiers_t *t) { return t ? t->n : 0; }
const kv_tier_spec_t *kv_tiers_spec(const kv_tiers_t *t, int i) { return &t->t[i].spec; }
const kv_tier_stats_t *kv_tiers_stats(const kv_tiers_t *t, int i) { return &t->t[i].st; }

int kv_tiers_find(const kv_tiers_t *t, uint64_t key) {
    for (int i = 0; t && i < t->n; i++)
        if (lookup(&t->t[i], key) >= 0) return i;
    return -1;
}

/* Writes key into tier i, pushing its least recently used key down when full. */
static void put_at(kv_tiers_t *ts, int i, uint64_t key) {
    while (i < ts->n) {
        tier_t *t = &ts->t[i];
        int32_t s = lookup(t, key);
        if (s >= 0) { /* already here: recently used again */
            unlink_slot(t, s);
            append(t, s);
            return;
        }
        t->st.writes++;
        uint64_t victim = 0;
        int have_victim = 0;
        if (t->st.held >= t->spec.capacity_blocks) {
            s = t->head;
            victim = t->key[s];
            have_victim = 1;
            unlink_slot(t, s);
            map_remove(t, s);
            t->st.held--;
            t->st.evictions++;
        } else if (grow(t) != 0) {
            return; /* out of memory: the key is not kept (a miss later, never wrong) */
        } else {
            s = t->n_free > 0 ? t->free_slots[--t->n_free] : t->used++;
        }
        t->key[s] = key;
        append(t, s);
        map_put(t, s);
        t->st.held++;
        if (!have_victim) return;
        key = victim;   /* the victim goes one tier down (no other tier holds it) */
        i++;
    }
}

void kv_tiers_put(kv_tiers_t *t, uint64_t key) {
    if (!t || t->n == 0) return;
    int at = kv_tiers_find(t, key);
    if (at > 0) { /* held lower down already: refresh it there, no write */
        tier_t *x = &t->t[at];
        int32_t s = lookup(x, key);
        unlink_slot(x, s);
        append(x, s);
        return;
    }
    put_at(t, 0, key);
}

void kv_tiers_hit(kv_tiers_t *t, int i, uint64_t key) {
    if (!t || i < 0 || i >= t->n) return;
    tier_t *x = &t->t[i];
    int32_t s = lookup(x, key);
    if (s < 0) return;
    x->st.hits++;
    unlink_slot(x, s);
    append(x, s);
}

void kv_tier_reload_s(const kv_tiers_t *t, const int32_t *n, double block_bytes,
                      double *overlap_s, double *serial_s) {
    *overlap_s = *serial_s = 0;
    for (int i = 0; t && i < t->n; i++) {
        if (n[i] <= 0) continue;
        const kv_tier_spec_t *s = &t->t[i].spec;
        double secs = s->latency_s + (double)n[i] * block_bytes / s->read_bps;
        if (s->overlap) *overlap_s += secs;
        else *serial_s += secs;
    }
}

/* "256GB", "2TB", "25GB/s" (suffix given): bytes. */
static int parse_bytes(const char *v, const char *suffix, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x > 0) || !isfinite(x)) return -1;
    static const struct { const char *u; double f; } units[] = {
        {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0},
        {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
    };
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        size_t n = strlen(units[i].u);
        if (!strncasecmp(end, units[i].u, n) && !strcasecmp(end + n, suffix)) {
            *out = x * units[i].f;
            return 0;
        }
    }
    return -1;
}

static int parse_secs(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x >= 0) || !isfinite(x)) return -1;
    if (!strcmp(end, "s")) *out = x;
    else if (!strcmp(end, "ms")) *out = x * 1e-3;
    else if (!strcmp(end, "us")) *out = x * 1e-6;
    else if (!strcmp(end, "ns")) *out = x * 1e-9;
    else return -1;
    return 0;
}

int kv_tier_parse(const char *text, double block_bytes, kv_tier_spec_t *spec, char *err,
                  size_t errlen) {
    static const kv_tier_spec_t kinds[] = {
        {"dram", 0, 50e9, 50e9, 10e-6, 1},
        {"ssd", 0, 7e9, 3.5e9, 100e-6, 0},
        {"pool", 0, 40e9, 40e9, 20e-6, 0},
    };
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text ? text : "");
    char *size = strchr(buf, ':');
    if (!size) {
        snprintf(err, errlen, "KV tier '%s': give KIND:SIZE (dram:256GB, ssd:2TB, pool:10TB)",
                 buf);
        return -1;
    }
    *size++ = '\0';
    char *opts = strchr(size, ':');
    if (opts) *opts++ = '\0';
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(buf, kinds[i].kind)) k = i;
    if (k < 0) {
        snprintf(err, errlen, "KV tier '%s': unknown kind '%s' (dram, ssd or pool)", text, buf);
        return -1;
    }
    *spec = kinds[k];
    double bytes;
    if (parse_bytes(size, "", &bytes) != 0) {
        snprintf(err, errlen, "KV tier '%s': size '%s' is not a positive size (256GB, 2TB, "
                 "512GiB)", text, size);
        return -1;
    }
    if (!(block_bytes > 0)) {
        snprintf(err, errlen, "KV tier '%s': the model's block size in bytes is unknown", text);
        return -1;
    }
    double blocks = floor(bytes / block_bytes);
    spec->capacity_blocks = blocks > 9e15 ? (int64_t)9e15 : (int64_t)blocks;
    char *save = NULL;
    for (char *item = opts ? strtok_r(opts, ",", &save) : NULL; item;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        const char *v = eq ? eq + 1 : "";
        if (eq) *eq = '\0';
        int known = 1, ok = 0;
        if (!eq) known = 0;
        else if (!strcmp(item, "read")) ok = parse_bytes(v, "/s", &spec->read_bps) == 0;
        else if (!strcmp(item, "write")) ok = parse_bytes(v, "/s", &spec->write_bps) == 0;
        else if (!strcmp(item, "lat")) ok = parse_secs(v, &spec->latency_s) == 0;
        else if (!strcmp(item, "overlap")) {
            ok = !strcmp(v, "0") || !strcmp(v, "1");
            spec->overlap = *v == '1';
        } else known = 0;
        if (!known) {
            snprintf(err, errlen, "KV tier '%s': unknown setting '%s' (read, write, lat, "
                     "overlap)", text, item);
            return -1;
        }
        if (!ok) {
            snprintf(err, errlen, "KV tier '%s': bad value '%s' for %s (read=50GB/s, "
                     "write=25GB/s, lat=2us, overlap=0|1)", text, v, item);
            return -1;
        }
    }
    if (spec->capacity_blocks < 1) {
        snprintf(err, errlen, "KV tier '%s': %s holds no block of %.0f bytes", text, size,
                 block_bytes);
        return -1;
    }
    return 0;
}
