-- twinserve record schema, version 7. The single source: the build compiles this file into
-- the binary as rec_schema_sql (traces/recorder.c), and the recorder checks existing
-- databases against the tables declared here, taking the version it accepts from the
-- meta INSERT below.
--
-- Versions: 1 the first; 2 added requests.cached_tokens (a version-1 file is refused as
-- older, not reported as lacking the column); 3 added the steps' forward-pass features
-- (tokens, pass_seqs, sampled, kv_tokens, attn_pairs) and host_s, which calibrate and
-- validate read; 4 added runs.kind 'measured' (`twinserve import`: measurements taken
-- elsewhere, with requests and optional tokens rows but no steps); 5 added the requests'
-- trace metadata (priority, tenant, deadline_s) that report --by groups by; 6 added the
-- cluster (issue #14): requests.replica, prefill_replica and kv_transfer_s, steps.replica,
-- and the replicas table describing each replica of a run; 7 added runs.kind 'serve'
-- (`twinserve serve`: live requests on the engine, recorded as an engine run is).
--
-- Every statement is idempotent (IF NOT EXISTS, INSERT OR IGNORE) so applying it to an
-- existing database of the same version changes nothing. A change to a table is a new
-- schema_version; the recorder refuses versions it does not know.
--
-- Units: times are seconds (REAL) from the start of the run (the simulator's clock 0 or the
-- engine's start) unless a column says otherwise; NULL time = never happened. Token counts
-- are tokens, KV counts are KV-cache blocks. REFERENCES clauses document the links; SQLite
-- enforces them only for a connection that turns on PRAGMA foreign_keys.

-- Facts about the database itself.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,  -- 'schema_version'
    value TEXT               -- for schema_version: the integer version of this file, as text
);
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '7');

-- One row per simulation, engine or measured (imported) run. Inserted with status 'running'
-- and committed before any other row of the run, so a run that crashed stays visible as
-- 'running'. A measured run has requests (and optional tokens) rows but no steps.
CREATE TABLE IF NOT EXISTS runs (
    -- run id (rowid), referenced by the other tables
    id         INTEGER PRIMARY KEY,
    -- unique per database; default "<kind>-<policy file stem>-<id>", e.g. "sim-continuous-3"
    name       TEXT UNIQUE NOT NULL,
    -- who produced the records: the simulator, our engine replaying a trace, our engine
    -- serving live clients (arrival = when the server received the request), or
    -- measurements taken elsewhere and imported (config holds "source" and "arrivals";
    -- docs/analysis.md, "## import")
    kind       TEXT NOT NULL CHECK (kind IN ('sim', 'engine', 'serve', 'measured')),
    -- policy script path, as given
    policy     TEXT,
    -- JSON object: the policy's effective params
    params     TEXT CHECK (params IS NULL OR json_valid(params)),
    -- trace path plus replay options (rate scale, window, limit)
    trace      TEXT,
    -- model preset or checkpoint path
    model      TEXT,
    -- hardware preset (sim) or device description (engine)
    hardware   TEXT,
    -- run seed; a uint64 stored as its int64 bit pattern
    seed       INTEGER,
    -- twinserve version that wrote the run
    version    TEXT,
    -- JSON object: scheduler config (KV blocks, token budget, ...)
    config     TEXT CHECK (config IS NULL OR json_valid(config)),
    -- 'running' from rec_run_begin until rec_run_end sets 'done' or 'failed'
    status     TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    -- why the run failed; NULL unless status = 'failed'
    error      TEXT,
    -- wall-clock start, UTC ISO-8601 'YYYY-MM-DDTHH:MM:SSZ'
    started_at TEXT,
    -- wall-clock duration of the whole run, seconds; NULL while running
    wall_s     REAL
);

-- One row per request of a run. The derived metrics (ttft_s .. queue_s) are computed by the
-- recorder only, following vLLM's benchmark definitions.
CREATE TABLE IF NOT EXISTS requests (
    run_id            INTEGER NOT NULL REFERENCES runs(id),
    req_id            INTEGER NOT NULL,  -- request id within the run (trace order, 0-based)
    arrival_s         REAL,     -- arrival time
    prompt_tokens     INTEGER,  -- prompt length
    output_tokens     INTEGER,  -- target output length (from the trace)
    generated_tokens  INTEGER,  -- output tokens actually emitted (= output_tokens if finished)
    first_scheduled_s REAL,     -- first time any of its tokens was scheduled
    first_token_s     REAL,     -- time its first output token was emitted
    finish_s          REAL,     -- time its last output token was emitted (aborted: the abort)
    ttft_s            REAL,     -- time to first token: first_token_s - arrival_s
    -- time per output token after the first: (e2e_s - ttft_s) / (generated_tokens - 1);
    -- NULL when generated_tokens <= 1 or the request did not finish
    tpot_s            REAL,
    e2e_s             REAL,     -- end-to-end latency: finish_s - arrival_s; NULL if not finished
    queue_s           REAL,     -- queueing delay: first_scheduled_s - arrival_s
    preemptions       INTEGER,  -- times it was preempted (KV freed, recomputed later)
    spec_proposed     INTEGER,  -- speculative draft tokens proposed for it
    spec_accepted     INTEGER,  -- of those, accepted by verification
    cached_tokens     INTEGER,  -- prompt tokens served by the prefix cache (not computed)
    -- Spelled with OR, not IN: SQLite evaluates an IN list in a CHECK through a temporary
    -- table per row, which halved the insert rate of this table.
    status            TEXT NOT NULL
                      CHECK (status = 'finished' OR status = 'rejected' OR status = 'aborted'),
    reason            TEXT,     -- why rejected/aborted; NULL when finished
    -- The trace's optional per-request metadata (traces/trace.h): priority (lower = more
    -- urgent; 0 when the trace has none), tenant (NULL when none), deadline_s (seconds
    -- after arrival_s to finish by, an end-to-end SLO; NULL when none)
    priority          INTEGER,
    tenant            TEXT,
    deadline_s        REAL,
    -- The replica that served it (decoded it, in a disaggregated cluster), 0-based as in
    -- replicas.replica; 0 for a single-replica run; NULL when a router rejected it before
    -- any replica saw it. A disaggregated run adds the replica that prefilled it and the
    -- seconds its KV transfer took, from the prefill's end to the decode replica holding
    -- it (queueing on the link included); both NULL otherwise.
    replica           INTEGER,
    prefill_replica   INTEGER,
    kv_transfer_s     REAL,
    PRIMARY KEY (run_id, req_id)
) WITHOUT ROWID;

-- One row per scheduler step (one batch executed by one replica).
CREATE TABLE IF NOT EXISTS steps (
    run_id         INTEGER NOT NULL REFERENCES runs(id),
    step           INTEGER NOT NULL,  -- step number within the run, 0-based
    start_s        REAL,     -- time the batch started executing
    dur_s          REAL,     -- execution time of the batch (cost model or measured)
    prefill_tokens INTEGER,  -- prompt (or recompute) tokens computed in the step
    decode_tokens  INTEGER,  -- decode tokens, 1 + k per speculative verification of k drafts
    pad_tokens     INTEGER,  -- padding slots (static batching)
    num_seqs       INTEGER,  -- sequences in the batch
    kv_used        INTEGER,  -- KV blocks in use after the step
    kv_total       INTEGER,  -- KV blocks available to the scheduler
    num_waiting    INTEGER,  -- requests waiting in the queue after the step
    num_preempted  INTEGER,  -- preemptions decided in the step
    sched_s        REAL,     -- wall-clock seconds spent in the scheduler for the step
    -- The forward pass's work, over every sequence of the pass (padding slots included; a
    -- speculative policy's draft-model passes are not counted): a sequence computing n new
    -- tokens after c cached ones adds n to tokens, c + n to kv_tokens and n*c + n(n+1)/2 to
    -- attn_pairs (sim/cost.h, cost_features).
    tokens         INTEGER,  -- tokens computed: prefill + decode + pad tokens
    pass_seqs      INTEGER,  -- sequences in the pass: num_seqs plus padding slots
    sampled        INTEGER,  -- rows whose logits were computed and sampled
    kv_tokens      INTEGER,  -- KV positions attention read: each sequence's context after the step
    attn_pairs     INTEGER,  -- (query, key) pairs attention scored, causal
    -- CPU-side time before the pass started: arrivals, the policy, batch preparation and
    -- the previous step's commit and records (engine: measured from the end of the previous
    -- pass, or from the wake-up after an idle wait; sim: the cost model's host term, 0 for
    -- the roofline)
    host_s         REAL,
    -- the replica that ran the step, 0-based (replicas.replica); step numbers stay unique
    -- within the run, in the order the steps ended
    replica        INTEGER,
    PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

-- One row per replica of a simulated run (engine and measured runs have none): what each
-- replica of the cluster was. A single-replica run has one row, replica 0.
CREATE TABLE IF NOT EXISTS replicas (
    run_id     INTEGER NOT NULL REFERENCES runs(id),
    replica    INTEGER NOT NULL,  -- 0-based, as requests.replica and steps.replica
    group_name TEXT,              -- the --cluster group it belongs to; NULL with --replicas
    role       TEXT NOT NULL CHECK (role = 'mixed' OR role = 'prefill' OR role = 'decode'),
    model      TEXT,              -- model preset name
    hardware   TEXT,              -- "GPU xTP", as runs.hardware
    tp         INTEGER,           -- tensor-parallel degree
    policy     TEXT,              -- policy file, as given
    kv_blocks  INTEGER,           -- its KV capacity in blocks
    params     TEXT,              -- its policy's effective params, a JSON object
    PRIMARY KEY (run_id, replica)
) WITHOUT ROWID;

-- Optional: one row per emitted output token (inter-token latency, output checks).
CREATE TABLE IF NOT EXISTS tokens (
    run_id   INTEGER NOT NULL REFERENCES runs(id),
    req_id   INTEGER NOT NULL,  -- request id, as in requests.req_id
    idx      INTEGER NOT NULL,  -- 0-based position in the request's output
    token_id INTEGER,           -- vocabulary id; -1 when unknown (simulator)
    t_s      REAL,              -- time the token was emitted
    PRIMARY KEY (run_id, req_id, idx)
) WITHOUT ROWID;
