/* cli: the subcommands of build/twinserve. main.c only dispatches; each cmd_* parses its own
 * options, prints usage on --help, and returns the process exit status (0 ok, 1 runtime
 * failure, 2 usage error). */
#ifndef TWIN_CLI_H
#define TWIN_CLI_H

#define TWIN_VERSION "0.1.0"

int cmd_sim(int argc, char **argv);       /* cli/cmd_sim.c */
int cmd_trace(int argc, char **argv);     /* cli/cmd_trace.c: trace gen | trace info */
int cmd_kv(int argc, char **argv);        /* cli/cmd_calc.c */
int cmd_roofline(int argc, char **argv);  /* cli/cmd_calc.c */
int cmd_presets(int argc, char **argv);   /* cli/cmd_calc.c */
int cmd_runs(int argc, char **argv);      /* cli/cmd_runs.c: one line per run in a database */
int cmd_report(int argc, char **argv);    /* cli/cmd_report.c */
int cmd_compare(int argc, char **argv);   /* cli/cmd_compare.c */
int cmd_plot(int argc, char **argv);      /* cli/cmd_plot.c */
int cmd_sweep(int argc, char **argv);     /* cli/cmd_sweep.c */
int cmd_upgrade(int argc, char **argv);   /* cli/cmd_upgrade.c: an older database brought up to date */
int cmd_merge(int argc, char **argv);     /* cli/cmd_merge.c: runs of databases into one */
int cmd_explain(int argc, char **argv);   /* cli/cmd_explain.c */
int cmd_generate(int argc, char **argv);  /* cli/cmd_generate.c */
int cmd_engine(int argc, char **argv);    /* cli/cmd_engine.c */
int cmd_serve(int argc, char **argv);     /* cli/cmd_serve.c: an OpenAI-compatible server */
int cmd_bench(int argc, char **argv);     /* cli/cmd_bench.c */
int cmd_calibrate(int argc, char **argv); /* cli/cmd_calibrate.c */
int cmd_validate(int argc, char **argv);  /* cli/cmd_validate.c */
int cmd_profile(int argc, char **argv);   /* cli/cmd_profile.c: timed passes -> a profile CSV */
int cmd_import(int argc, char **argv);    /* cli/cmd_import.c: measurements -> a measured run */
int cmd_quantize(int argc, char **argv);  /* cli/cmd_quantize.c: a model as GGUF in one type */

#endif
