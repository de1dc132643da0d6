/* The subcommands of the promptkv CLI; each returns the process exit code. */
#ifndef PKV_CLI_COMMANDS_H
#define PKV_CLI_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
