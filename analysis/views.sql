-- analysis/views.sql: read-only SQL views over the twinserve records (traces/schema.sql), for
-- sqlite3, pandas or Datasette users. The recorder applies this file after the schema to
-- every database it opens (compiled in as analysis_views_sql); a database of the same
-- schema_version written before the views existed gets them with
-- `sqlite3 old.db < analysis/views.sql` (not one of an older schema_version: the views read
-- its columns, e.g. requests.cached_tokens, new in version 2).
--
-- Every statement is CREATE VIEW IF NOT EXISTS, so applying it twice changes nothing. Views
-- only rename and combine columns: the metric definitions stay in traces/recorder.c, and the
-- definitions here match analysis/summary.c (makespan = last finish of a finished request -
-- first arrival of any; throughput counts finished requests and their tokens). Percentiles
-- are not here (SQLite has no percentile function): use `twinserve report`.

-- One row per request, with its run's name and policy. Times in seconds; NULL = never
-- (e.g. tpot_s for one-token outputs, e2e_s for requests that did not finish). To test SLOs:
--   WHERE status = 'finished' AND ttft_s <= 0.5 AND (tpot_s IS NULL OR tpot_s <= 0.05)
CREATE VIEW IF NOT EXISTS request_metrics AS
SELECT r.id                 AS run_id,
       r.name               AS run,
       r.kind               AS kind,
       r.policy             AS policy,
       q.req_id             AS req_id,
       q.status             AS status,
       q.arrival_s          AS arrival_s,
       q.prompt_tokens      AS prompt_tokens,
       q.output_tokens      AS output_tokens,
       q.generated_tokens   AS generated_tokens,
       q.cached_tokens      AS cached_tokens,
       q.preemptions        AS preemptions,
       q.ttft_s             AS ttft_s,
       q.tpot_s             AS tpot_s,
       q.e2e_s              AS e2e_s,
       q.queue_s            AS queue_s,
       q.e2e_s - q.ttft_s   AS decode_s,   -- first token to last
       q.reason             AS reason
FROM requests q JOIN runs r ON r.id = q.run_id;

-- One row per run: counts, makespan, throughput and mean latencies (seconds). A measured
-- run without arrival times (every arrival_s 0, config "arrivals":"unknown") takes the
-- benchmark's duration (config "duration_s") as its makespan, as summary.c does.
CREATE VIEW IF NOT EXISTS run_summary AS
SELECT run_id, run, kind, policy, status, trace,
       requests, completed, rejected, aborted, preempted,
       makespan_s,
       CASE WHEN makespan_s > 0 THEN completed / makespan_s END AS req_per_s,
       CASE WHEN makespan_s > 0 THEN output_tokens / makespan_s END AS out_tok_per_s,
       CASE WHEN makespan_s > 0
            THEN (prompt_tokens + output_tokens) / makespan_s END AS tok_per_s,
       mean_ttft_s, mean_tpot_s, mean_e2e_s, mean_queue_s,
       max_ttft_s, max_e2e_s
FROM (
    SELECT r.id AS run_id,
           r.name AS run,
           r.kind AS kind,
           r.policy AS policy,
           r.status AS status,
           r.trace AS trace,
           s.requests, s.completed, s.rejected, s.aborted, s.preempted,
           CASE WHEN r.kind = 'measured' AND json_extract(r.config, '$.arrivals') = 'unknown'
                THEN json_extract(r.config, '$.duration_s') ELSE s.span_s END AS makespan_s,
           s.prompt_tokens, s.output_tokens,
           s.mean_ttft_s, s.mean_tpot_s, s.mean_e2e_s, s.mean_queue_s,
           s.max_ttft_s, s.max_e2e_s
    FROM runs r LEFT JOIN (
        SELECT run_id,
               count(*) AS requests,
               sum(status = 'finished') AS completed,
               sum(status = 'rejected') AS rejected,
               sum(status = 'aborted') AS aborted,
               sum(preemptions > 0) AS preempted,
               max(CASE WHEN status = 'finished' THEN finish_s END) - min(arrival_s) AS span_s,
               1.0 * sum(CASE WHEN status = 'finished' THEN prompt_tokens END) AS prompt_tokens,
               1.0 * sum(CASE WHEN status = 'finished' THEN generated_tokens END)
                   AS output_tokens,
               avg(ttft_s) AS mean_ttft_s,
               avg(tpot_s) AS mean_tpot_s,
               avg(e2e_s) AS mean_e2e_s,
               avg(queue_s) AS mean_queue_s,
               max(ttft_s) AS max_ttft_s,
               max(e2e_s) AS max_e2e_s
        FROM requests GROUP BY run_id
    ) s ON s.run_id = r.id
);

-- One row per step, with its end time, total tokens and KV utilisation (fraction).
CREATE VIEW IF NOT EXISTS step_timeline AS
SELECT r.name AS run,
       t.run_id, t.step, t.start_s, t.dur_s,
       t.start_s + t.dur_s AS end_s,
       t.prefill_tokens, t.decode_tokens, t.pad_tokens,
       t.prefill_tokens + t.decode_tokens AS tokens,
       t.num_seqs, t.kv_used, t.kv_total,
       CASE WHEN t.kv_total > 0 THEN 1.0 * t.kv_used / t.kv_total END AS kv_util,
       t.num_waiting, t.num_preempted
FROM steps t JOIN runs r ON r.id = t.run_id;

-- One row per token emission after a request's first: the gap since the previous emission
-- of the same request (inter-token latency, ITL), when the run saved tokens. Tokens emitted
-- together (a speculative step's, at one t_s) are one emission, as report's ITL.
CREATE VIEW IF NOT EXISTS token_gaps AS
SELECT run_id, req_id, idx, t_s, gap_s FROM (
    SELECT run_id, req_id, idx, t_s,
           t_s - lag(t_s) OVER (PARTITION BY run_id, req_id ORDER BY idx) AS gap_s
    FROM tokens)
WHERE gap_s IS NOT NULL AND gap_s <> 0;
