/* test_yaml_lite: the strict YAML subset reader (traces/yaml_lite.h).
 *
 * What is checked: a resolved inference-perf config.yaml (the layout of the vLLM-H100
 * folders, copied here so the suite needs no data) reads with its types, values and lines;
 * the core-schema typing of plain scalars, quoted strings and their escapes, comments,
 * CRLF and a BOM; block sequences at the key's indentation and deeper; every refused
 * construct with its exact "NAME:LINE: what" message; and a cheap fuzz: every truncation
 * and thousands of seeded byte mutations of the config parse or fail with a message,
 * never crash, and a document that parsed can be walked whole. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "traces/yaml_lite.h"

/* config.yaml of 20260217-231439-llama-2-7b-tp1-general, as inference-perf dumped it */
static const char config_yaml[] =
    "api:\n"
    "  type: completion\n"
    "  streaming: true\n"
    "  headers: null\n"
    "data:\n"
    "  type: shared_prefix\n"
    "  path: null\n"
    "  input_distribution: null\n"
    "  output_distribution: null\n"
    "  shared_prefix:\n"
    "    num_groups: 10\n"
    "    num_prompts_per_group: 10\n"
    "    system_prompt_len: 100\n"
    "    question_len: 447\n"
    "    output_len: 248\n"
    "load:\n"
    "  type: constant\n"
    "  interval: 1.0\n"
    "  stages:\n"
    "  - rate: 8.0\n"
    "    duration: 600\n"
    "  - rate: 20.0\n"
    "    duration: 600\n"
    "  sweep: null\n"
    "  num_workers: 224\n"
    "  worker_max_concurrency: 100\n"
    "  worker_max_tcp_connections: 2500\n"
    "  circuit_breakers: []\n"
    "  request_timeout: null\n"
    "metrics: null\n"
    "report:\n"
    "  request_lifecycle:\n"
    "    summary: true\n"
    "    per_stage: true\n"
    "    per_request: true\n"
    "  prometheus:\n"
    "    summary: true\n"
    "    per_stage: false\n"
    "storage:\n"
    "  local_storage:\n"
    "    path: /workspace/data/20260217-231439-llama-2-7b-tp1-general-1/results\n"
    "    report_file_prefix: null\n"
    "  google_cloud_storage: null\n"
    "  simple_storage_service: null\n"
    "server:\n"
    "  type: vllm\n"
    "  model_name: meta-llama/Llama-2-7b-hf\n"
    "  base_url: http://10.131.8.60:8000\n"
    "  ignore_eos: true\n"
    "  api_key: null\n"
    "tokenizer:\n"
    "  pretrained_model_name_or_path: meta-llama/Llama-2-7b-hf\n"
    "  trust_remote_code: null\n"
    "  token: null\n"
    "circuit_breakers: null\n";

static yaml_doc_t *parse_ok(const char *text) {
    yaml_doc_t *d;
    char err[512];
    ck_assert_msg(yaml_parse(text, strlen(text), "t.yaml", &d, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(d);
    return d;
}

/* The node at a dotted path ("load.stages"), items by number ("load.stages.1.rate"). */
static const yaml_node_t *at(const yaml_doc_t *d, const char *path) {
    const yaml_node_t *n = yaml_root(d);
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = strtok_r(buf, ".", &save); p && n; p = strtok_r(NULL, ".", &save))
        n = yaml_type(n) == YAML_SEQ ? yaml_at(n, (size_t)atoi(p), NULL) : yaml_get(n, p);
    return n;
}

START_TEST(test_config_yaml) {
    yaml_doc_t *d = parse_ok(config_yaml);
    ck_assert_str_eq(yaml_name(d), "t.yaml");
    ck_assert_int_eq(yaml_type(yaml_root(d)), YAML_MAP);
    ck_assert_int_eq(yaml_len(yaml_root(d)), 9);
    ck_assert_str_eq(yaml_str(at(d, "api.type")), "completion");
    ck_assert_int_eq(yaml_type(at(d, "api.streaming")), YAML_BOOL);
    ck_assert_int_eq(yaml_bool(at(d, "api.streaming")), 1);
    ck_assert_int_eq(yaml_type(at(d, "api.headers")), YAML_NULL);
    ck_assert_ptr_null(yaml_str(at(d, "api.headers")));
    ck_assert_int_eq(yaml_type(at(d, "data.shared_prefix.num_groups")), YAML_INT);
    ck_assert_int_eq(yaml_int(at(d, "data.shared_prefix.output_len")), 248);
    ck_assert_int_eq(yaml_line(at(d, "data.shared_prefix.output_len")), 15);
    ck_assert_int_eq(yaml_line(at(d, "data.shared_prefix")), 10);
    ck_assert_int_eq(yaml_type(at(d, "load.interval")), YAML_FLOAT);
    ck_assert(yaml_num(at(d, "load.interval")) == 1.0);
    const yaml_node_t *st = at(d, "load.stages");
    ck_assert_int_eq(yaml_type(st), YAML_SEQ);
    ck_assert_int_eq(yaml_len(st), 2);
    ck_assert_int_eq(yaml_line(st), 19);
    ck_assert_int_eq(yaml_line(at(d, "load.stages.1")), 22);
    ck_assert(yaml_num(at(d, "load.stages.1.rate")) == 20.0);
    ck_assert_int_eq(yaml_type(at(d, "load.stages.0.duration")), YAML_INT);
    ck_assert_int_eq(yaml_int(at(d, "load.stages.0.duration")), 600);
    ck_assert_ptr_null(at(d, "load.stages.2"));
    /* the keys after the sequence belong to load again */
    ck_assert_int_eq(yaml_int(at(d, "load.num_workers")), 224);
    ck_assert_int_eq(yaml_type(at(d, "load.circuit_breakers")), YAML_SEQ);
    ck_assert_int_eq(yaml_len(at(d, "load.circuit_breakers")), 0);
    ck_assert_str_eq(yaml_str(at(d, "server.base_url")), "http://10.131.8.60:8000");
    ck_assert_str_eq(yaml_str(at(d, "storage.local_storage.path")),
                     "/workspace/data/20260217-231439-llama-2-7b-tp1-general-1/results");
    ck_assert_int_eq(yaml_type(at(d, "circuit_breakers")), YAML_NULL);
    ck_assert_int_eq(yaml_line(at(d, "circuit_breakers")), 55);
    /* order kept, keys given out */
    const char *key = NULL;
    ck_assert_ptr_nonnull(yaml_at(yaml_root(d), 8, &key));
    ck_assert_str_eq(key, "circuit_breakers");
    ck_assert_ptr_null(yaml_at(yaml_root(d), 9, NULL));
    /* typed accessors on the wrong type */
    ck_assert(isnan(yaml_num(at(d, "api.type"))));
    ck_assert_int_eq(yaml_int(at(d, "load.interval")), 0);
    ck_assert_ptr_null(yaml_get(at(d, "api.type"), "x"));
    ck_assert_int_eq(yaml_len(at(d, "api.type")), 0);
    yaml_free(d);
}
END_TEST

START_TEST(test_scalars) {
    static const struct { const char *v; yaml_type_t t; const char *text; double num; } cases[] = {
        {"null", YAML_NULL, NULL, NAN}, {"Null", YAML_NULL, NULL, NAN},
        {"NULL", YAML_NULL, NULL, NAN}, {"~", YAML_NULL, NULL, NAN},
        {"true", YAML_BOOL, "true", NAN}, {"False", YAML_BOOL, "False", NAN},
        {"0", YAML_INT, "0", 0}, {"-17", YAML_INT, "-17", -17}, {"+5", YAML_INT, "+5", 5},
        {"007", YAML_INT, "007", 7}, {"1.5", YAML_FLOAT, "1.5", 1.5},
        {"-2.5e-3", YAML_FLOAT, "-2.5e-3", -2.5e-3}, {".5", YAML_FLOAT, ".5", 0.5},
        {"1.", YAML_FLOAT, "1.", 1.0}, {"1e3", YAML_FLOAT, "1e3", 1000},
        {"0x1F", YAML_STR, "0x1F", NAN}, {"1.2.3", YAML_STR, "1.2.3", NAN},
        {"1e", YAML_STR, "1e", NAN}, {".inf", YAML_STR, ".inf", NAN},
        {"yes", YAML_STR, "yes", NAN}, {"a#b", YAML_STR, "a#b", NAN},
        {"a b  # comment", YAML_STR, "a b", NAN}, {"a:b", YAML_STR, "a:b", NAN},
        {"\"123\"", YAML_STR, "123", NAN}, {"'null'", YAML_STR, "null", NAN},
        {"\"a \\\"q\\\" \\\\ \\/ \\t\" # c", YAML_STR, "a \"q\" \\ / \t", NAN},
        {"'it''s: # not a comment'", YAML_STR, "it's: # not a comment", NAN},
        {"\"\"", YAML_STR, "", NAN}, {"-", YAML_NULL, NULL, NAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[256], err[512];
        yaml_doc_t *d;
        snprintf(text, sizeof text, "k: %s\n", cases[i].v);
        if (!strcmp(cases[i].v, "-")) continue;   /* refused below, as a sequence */
        ck_assert_msg(yaml_parse(text, strlen(text), "s", &d, err, sizeof err) == 0, "%s: %s",
                      cases[i].v, err);
        const yaml_node_t *n = yaml_get(yaml_root(d), "k");
        ck_assert_msg(yaml_type(n) == cases[i].t, "%s: %s", cases[i].v,
                      yaml_type_name(yaml_type(n)));
        if (cases[i].text) ck_assert_str_eq(yaml_str(n), cases[i].text);
        else ck_assert_ptr_null(yaml_str(n));
        if (!isnan(cases[i].num)) ck_assert(yaml_num(n) == cases[i].num);
        yaml_free(d);
    }
    yaml_doc_t *d = parse_ok("a: true\nb: false\nc: 9223372036854775807\n");
    ck_assert_int_eq(yaml_bool(yaml_get(yaml_root(d), "a")), 1);
    ck_assert_int_eq(yaml_bool(yaml_get(yaml_root(d), "b")), 0);
    ck_assert(yaml_int(yaml_get(yaml_root(d), "c")) == INT64_MAX);
    yaml_free(d);
}
END_TEST

START_TEST(test_layouts) {
    /* CRLF, a BOM, comments, blank lines, an empty value, "key:" with a comment, a deeper
     * sequence, an item with a nested mapping, the first line indented */
    yaml_doc_t *d = parse_ok("\xEF\xBB\xBF# head\r\n"
                             "a: 1\r\n"
                             "\r\n"
                             "b:   # nothing\r\n"
                             "c:\r\n"
                             "    - x: 1\r\n"
                             "      y:\r\n"
                             "        z: two\r\n"
                             "    -   x: 2\r\n"
                             "  # indented comment\r\n"
                             "d: {}\r\n");
    ck_assert_int_eq(yaml_int(at(d, "a")), 1);
    ck_assert_int_eq(yaml_type(at(d, "b")), YAML_NULL);
    ck_assert_int_eq(yaml_line(at(d, "b")), 4);
    ck_assert_int_eq(yaml_len(at(d, "c")), 2);
    ck_assert_str_eq(yaml_str(at(d, "c.0.y.z")), "two");
    ck_assert_int_eq(yaml_int(at(d, "c.1.x")), 2);
    ck_assert_int_eq(yaml_type(at(d, "d")), YAML_MAP);
    ck_assert_int_eq(yaml_len(at(d, "d")), 0);
    yaml_free(d);
    d = parse_ok("  a:\n    b: 1\n  c: 2\n");
    ck_assert_int_eq(yaml_int(at(d, "a.b")), 1);
    ck_assert_int_eq(yaml_int(at(d, "c")), 2);
    yaml_free(d);
    /* a key whose value is a sequence at the key's indentation, inside an item */
    d = parse_ok("s:\n- a:\n  - b: 1\n- a: 2\n");
    ck_assert_int_eq(yaml_int(at(d, "s.0.a.0.b")), 1);
    ck_assert_int_eq(yaml_int(at(d, "s.1.a")), 2);
    yaml_free(d);
}
END_TEST

START_TEST(test_refused) {
    static const struct { const char *text, *want; } cases[] = {
        {"", "n: empty: no `key: value` line"},
        {"# only\n\n   \n", "n: empty: no `key: value` line"},
        {"a:\n\tb: 1\n", "n:2: a tab in the indentation (YAML indents with spaces)"},
        {"a:\n  \tb: 1\n", "n:2: a tab in the indentation (YAML indents with spaces)"},
        {"a: &x 1\n", "n:1: anchors, aliases and tags (&, *, !) are not supported"},
        {"a: *x\n", "n:1: anchors, aliases and tags (&, *, !) are not supported"},
        {"a: !!str 1\n", "n:1: anchors, aliases and tags (&, *, !) are not supported"},
        {"a: |\n  text\n", "n:1: block scalars (| and >) are not supported"},
        {"a: >-\n  text\n", "n:1: block scalars (| and >) are not supported"},
        {"a: [1, 2]\n", "n:1: a flow sequence ([...]) with content is not supported: write it "
         "as a block"},
        {"a: {b: 1}\n", "n:1: a flow mapping ({...}) with content is not supported: write it "
         "as a block"},
        {"a: [] x\n", "n:1: a flow sequence ([...]) with content is not supported: write it "
         "as a block"},
        {"a: one\n  two\n", "n:2: more indented than the line before, which has its value "
         "(multi-line values are not supported)"},
        {"a: \"one\n  two\"\n", "n:1: an unterminated quoted string (a string must end on its "
         "line)"},
        {"a: 'x\n", "n:1: an unterminated quoted string (a string must end on its line)"},
        {"a: \"\\u0041\"\n", "n:1: the escape '\\u' is not supported (only \\\" \\\\ \\/ \\n "
         "\\t \\r)"},
        {"a: \"x\" y\n", "n:1: text after a closing quote"},
        {"---\na: 1\n", "n:1: document markers (--- and ...) are not supported"},
        {"a: 1\n...\n", "n:2: document markers (--- and ...) are not supported"},
        {"\"a\": 1\n", "n:1: quoted keys are not supported"},
        {"? a\n: 1\n", "n:1: complex keys (? ...) are not supported"},
        {"[a, b]\n", "n:1: flow collections ([...], {...}) are not supported: write them as "
         "blocks"},
        {"a: 1\nplain\n", "n:2: expected `key: value` or `key:` (a plain scalar line on its "
         "own, or a value continued from the line before, is not supported)"},
        {"a:\n- 1\n", "n:2: a sequence item that is not a mapping (only `- key: value` items "
         "are supported)"},
        {"a:\n-\n  b: 1\n", "n:2: a sequence item that is not a mapping (only `- key: value` "
         "items are supported)"},
        {"a:\n- - b: 1\n", "n:2: a sequence item that is not a mapping (only `- key: value` "
         "items are supported)"},
        {"a:\n-\tb: 1\n", "n:2: a tab after '-' (YAML indents with spaces)"},
        {"a: b: c\n", "n:1: a plain value holding ': ' (quote it; a mapping on one line is "
         "not supported)"},
        {"a: b:\n", "n:1: a plain value holding ': ' (quote it; a mapping on one line is not "
         "supported)"},
        {"a: - b\n", "n:1: '- ' after a key is not supported (a sequence or a complex key on "
         "the key's line)"},
        {"a: -\n", "n:1: '- ' after a key is not supported (a sequence or a complex key on the "
         "key's line)"},
        {"a: @x\n", "n:1: a plain value cannot start with '@' (quote it)"},
        {"a: 1\nb: 2\na: 3\n", "n:3: key 'a' repeats line 1"},
        {"a:\n    b: 1\n  c: 2\n", "n:3: the indentation (2 spaces) matches no enclosing block"},
        {"a: 1\n b: 2\n", "n:2: more indented than the line before, which has its value "
         "(multi-line values are not supported)"},
        {"- a: 1\n", "n:1: the top level is a sequence; a mapping is expected"},
        {"a:\n  - b: 1\n  c: 2\n", "n:3: the indentation (2 spaces) matches no enclosing "
         "block"},
        {"a: 1\n- b: 2\n", "n:2: a sequence item where a key was expected (a sequence goes "
         "right under its `key:`)"},
        {"a: 99999999999999999999\n", "n:1: integer '99999999999999999999' is out of range"},
        {"a: 1e999\n", "n:1: float '1e999' is out of range"},
        {"a # c: 1\n", "n:1: a comment inside a key"},
        {"&a: 1\n", "n:1: a key cannot start with '&'"},
        {"a:b\n", "n:1: expected `key: value` or `key:` (a plain scalar line on its own, or a "
         "value continued from the line before, is not supported)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        yaml_doc_t *d = (yaml_doc_t *)1;
        char err[512] = "";
        ck_assert_msg(yaml_parse(cases[i].text, strlen(cases[i].text), "n", &d, err,
                                 sizeof err) == -1, "case %zu parsed", i);
        ck_assert_ptr_null(d);
        ck_assert_msg(!strcmp(err, cases[i].want), "case %zu:\n got  %s\n want %s", i, err,
                      cases[i].want);
    }
    /* a NUL byte names its line */
    yaml_doc_t *d;
    char err[256];
    ck_assert_int_eq(yaml_parse("a: 1\nb: \0\n", 10, "n", &d, err, sizeof err), -1);
    ck_assert_str_eq(err, "n:2: a NUL byte (not a text file?)");
    /* nesting past the limit */
    char deep[8192] = "";
    size_t len = 0;
    for (int k = 0; k <= YAML_MAX_DEPTH + 1; k++)
        len += (size_t)snprintf(deep + len, sizeof deep - len, "%*sk:\n", 2 * k, "");
    snprintf(deep + len, sizeof deep - len, "%*sk: 1\n", 2 * (YAML_MAX_DEPTH + 2), "");
    ck_assert_int_eq(yaml_parse(deep, strlen(deep), "n", &d, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "nested deeper than 64 levels"), "%s", err);
}
END_TEST

START_TEST(test_load) {
    char path[256], err[512], want[400];
    yaml_doc_t *d;
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".yaml", config_yaml));
    ck_assert_msg(yaml_load(path, &d, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(yaml_name(d), path);
    ck_assert_int_eq(yaml_int(at(d, "load.worker_max_tcp_connections")), 2500);
    yaml_free(d);
    unlink(path);
    ck_assert_int_eq(yaml_load(path, &d, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    ck_assert_str_eq(err, want);
    yaml_free(NULL);
}
END_TEST

/* The fuzz loop's findings: Check records every passing assertion (a pipe write per
 * check when it forks), so the loop counts problems and asserts once at the end. */
static size_t fz_bad, fz_parsed, fz_refused;
static char fz_first[600];

static void fz_flag(const char *what, const char *err) {
    if (!fz_bad++) snprintf(fz_first, sizeof fz_first, "%s (%s)", what, err);
}

/* Visits every node of a parsed document, checking what the accessors promise. */
static void walk(const yaml_node_t *n, int depth) {
    yaml_type_t t = yaml_type(n);
    if (depth > YAML_MAX_DEPTH + 2 || yaml_line(n) < 1 || t > YAML_SEQ) {
        fz_flag("a node out of bounds", "");
        return;
    }
    if ((t == YAML_STR || t == YAML_INT || t == YAML_FLOAT || t == YAML_BOOL) && !yaml_str(n))
        fz_flag("a scalar without text", "");
    size_t len = yaml_len(n);
    for (size_t i = 0; i < len; i++) {
        const char *key = NULL;
        const yaml_node_t *c = yaml_at(n, i, &key);
        if (!c || (t == YAML_MAP && yaml_get(n, key) != c)) {
            fz_flag("an entry that cannot be found again", key ? key : "");
            return;
        }
        walk(c, depth + 1);
    }
    if (yaml_at(n, len, NULL)) fz_flag("an entry past the end", "");
}

static void parse_any(const char *text, size_t len) {
    yaml_doc_t *d;
    char err[512] = "";
    if (yaml_parse(text, len, "fz", &d, err, sizeof err) == 0) {
        if (yaml_type(yaml_root(d)) != YAML_MAP) fz_flag("a root that is not a mapping", "");
        walk(yaml_root(d), 0);
        yaml_free(d);
        fz_parsed++;
    } else if (d || strncmp(err, "fz:", 3) != 0) {
        fz_flag("a failure without its place, or with a document", err);
    } else {
        fz_refused++;
    }
}

/* Never a crash, always a message: every prefix of the config, every byte replaced by each
 * character the grammar cares about, and seeded random multi-byte mutations. */
START_TEST(test_fuzz) {
    static const char special[] = " \t:-#\"'\n\r[]{}&*!|>?~,\\x0";
    size_t n = strlen(config_yaml);
    char buf[sizeof config_yaml];
    for (size_t len = 0; len <= n; len++) parse_any(config_yaml, len);
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < sizeof special; s++) {   /* includes the terminating NUL */
            memcpy(buf, config_yaml, n);
            buf[i] = special[s];
            parse_any(buf, n);
        }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 20000; round++) {
        memcpy(buf, config_yaml, n);
        int edits = 1 + (int)(x % 4);
        for (int e = 0; e < edits; e++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[x % n] = (x >> 24) % 3 ? special[(x >> 32) % (sizeof special - 1)]
                                       : (char)((x >> 40) & 0xff);
        }
        parse_any(buf, (size_t)((x >> 48) % (n + 1)));
    }
    ck_assert_msg(fz_bad == 0, "%zu problems, the first: %s", fz_bad, fz_first);
    /* both outcomes occur, so the mutations reach past the first line */
    ck_assert_msg(fz_parsed > 1000 && fz_refused > 1000, "%zu parsed, %zu refused", fz_parsed,
                  fz_refused);
}
END_TEST

int main(void) {
    Suite *s = suite_create("yaml_lite");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config_yaml);
    tcase_add_test(tc, test_scalars);
    tcase_add_test(tc, test_layouts);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_fuzz);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}
