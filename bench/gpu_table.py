"""bench/gpu_table.py: the one-page summary of a bench/gpu.sh run (issue #17).

usage: python3 bench/gpu_table.py LOGDIR GPU_NAME MODE [LEFT_OUT]
Reads LOGDIR/steps.tsv (one line a step: name, status, seconds, note) and the benchmarks'
JSON (LOGDIR/NAME.json); prints the table. MODE is "final" (the run's verdict) or
"partial" (written after each step while the run goes on, so an interrupted run still
leaves a summary). LEFT_OUT names files too large for the archive. Exit status 0 when
every step passed and both targets are met (a dry run without a GPU never passes).
"""
import json, os, sys
d, gpu, mode = sys.argv[1], sys.argv[2], sys.argv[3]
left_out = sys.argv[4].split() if len(sys.argv) > 4 else []
steps = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "steps.tsv")) if l.strip()]
def load(name):
    try:
        with open(os.path.join(d, name + ".json")) as f:
            return json.load(f)
    except Exception:
        return None
def note(name):
    for s in steps:
        if s[0] == name:
            return (f"{s[1]}: {s[3]}" if len(s) > 3 else s[1])[:110]
    return "not run"
ok = all(s[1] in ("PASS", "INFO") or (s[1] == "SKIP" and s[0] == "build") for s in steps)
out = []
p = out.append
p(f"== bench/gpu.sh: {gpu}; logs in {d} ==")
if gpu.startswith("no GPU"):
    p("NO GPU: a dry run; the CUDA tests and timings cannot run on this machine, no GPU figure below")
if mode != "final":
    p("INCOMPLETE: written after the last step listed; the run had not finished")
p(f"{'step':<18} {'status':<8} {'s':>4}  note")
for s in steps:
    p(f"{s[0]:<18} {s[1]:<8} {s[2]:>4}  {s[3] if len(s) > 3 else ''}")
p("")
p(f"{'figure':<38} {'measured':>14} {'roof':>16} {'fraction':>9}  {'target':<8} verdict")
def row(fig, meas, roof, frac, target="", verdict=""):
    p(f"{fig:<38} {meas:>14} {roof:>16} {frac:>9}  {target:<8} {verdict}")
targets_met = True
def what(r):
    m = r["model"][6:] if r["model"].startswith("dummy:") else os.path.basename(r["model"])
    return m + " " + {"f32": "fp32", "f16": "fp16"}.get(r["weight_type"], r["weight_type"])
dec, pre, f32 = load("decode_bf16"), load("prefill_bf16"), load("decode_f32")
for r in (dec, pre, f32):
    if r:
        row(f"roofs ({what(r)} run)",
            f"{r['mem_bw_gbs']/1e3:.2f} TB/s", "read bandwidth", "", "", "")
        row("", f"{r['gemm_gflops']/1e3:.0f} TFLOP/s", r['gemm_label'], "", "", "")
if dec:
    for x in dec["results"]:
        b = x["batch"]
        if b == 1:
            v1 = x["frac_mem_roof"] >= 0.85
            v2 = x["frac_read_bw"] >= 0.85
            targets_met &= v1
            row(f"decode {what(dec)} b=1 ctx {dec['ctx']}", f"{x['tok_per_s']:.1f} tok/s",
                f"{dec['mem_roof_tok_per_s_batch1']:.1f} tok/s",
                f"{100*x['frac_mem_roof']:.1f}%", ">= 85%", "PASS" if v1 else "FAIL")
            row("  bytes really read per step", f"{x['read_bytes_per_step']/1e9:.2f} GB",
                f"{dec['mem_bw_gbs']/1e3:.2f} TB/s", f"{100*x['frac_read_bw']:.1f}%", ">= 85%",
                "PASS" if v2 else "FAIL")
        else:
            row(f"decode {what(dec)} b={b} ctx {dec['ctx']}", f"{x['tok_per_s']:.0f} tok/s",
                f"{dec['compute_roof_tok_per_s']:.0f} tok/s", f"{100*x['frac_compute_roof']:.1f}%",
                "", f"(compute; bytes read {100*x['frac_read_bw']:.0f}% of bw)")
else:
    targets_met = False
    row("decode llama-3-8b bf16 b=1,64,256", "no result", "", "", ">= 85%", note("decode_bf16"))
cub = load("decode_bf16_cublas")
if cub:
    x = cub["results"][0]
    row("  b=1 with cuBLAS only (no gemv)", f"{x['tok_per_s']:.1f} tok/s",
        f"{cub['mem_roof_tok_per_s_batch1']:.1f} tok/s", f"{100*x['frac_mem_roof']:.1f}%", "", "")
if pre and pre.get("prefill"):
    x = pre["prefill"]
    v = x["frac_gemm_roof"] >= 0.60
    targets_met &= v
    row(f"prefill {what(pre)} {x['tokens']} tokens", f"{x['tok_per_s']:.0f} tok/s",
        f"{pre['gemm_gflops']/1e3:.0f} TFLOP/s", f"{100*x['frac_gemm_roof']:.1f}%", ">= 60%",
        "PASS" if v else "FAIL")
    row(f"  median {x['median_ms']:.1f} ms, best {x['best_ms']:.1f} ms",
        f"{x['tflops']:.0f} TFLOP/s", "(work performed)", "", "", "")
else:
    targets_met = False
    row("prefill llama-3-8b bf16 4096 tokens", "no result", "", "", ">= 60%", note("prefill_bf16"))
if f32:
    x = f32["results"][0]
    row(f"decode {what(f32)} b=1 ctx {f32['ctx']}", f"{x['tok_per_s']:.1f} tok/s",
        f"{f32['mem_roof_tok_per_s_batch1']:.1f} tok/s", f"{100*x['frac_mem_roof']:.1f}%", "", "")
else:
    row("decode llama-3.2-1b fp32 b=1", "no result", "", "", "", note("decode_f32"))
fid = load("fidelity")
if fid:
    st = fid["steps"]["pass"]
    row("fidelity llama-3.2-1b bf16 (validate)", f"MAPE {100*fid['mape']:.1f}%",
        f"step med {100*st['median_abs_error']:.1f}%", f"p90 {100*st['p90_abs_error']:.1f}%",
        "", "(see fidelity/validate.txt)")
else:
    row("fidelity (profile, calibrate, validate)", "no result", "", "", "", note("fidelity"))
p("")
p("fractions: decode b=1 of the measured read bandwidth (weight bytes x tok/s, the issue's "
  "figure; 'bytes really read' leaves out the untied embedding table and adds the KV "
  "cache), b=64/256 of the compute roof, prefill of the measured GEMM rate (median run); "
  "each roof measured in the same run")
if left_out:
    p("left out of the archive (over 8 MiB): " + " ".join(left_out))
verdict = "PASS" if ok and targets_met else "FAIL"
if gpu.startswith("no GPU"):
    verdict = "NO GPU (exit status 3)"
elif mode != "final":
    verdict = "INCOMPLETE"
p(f"overall: {verdict} (steps {'all passed' if ok else 'not all passed'}, "
  f"targets {'met' if targets_met else 'not met'})")
print("\n".join(out))
sys.exit(0 if ok and targets_met else 1)