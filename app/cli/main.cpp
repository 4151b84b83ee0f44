// trainbench-cli: headless front end of the engine (no Qt): run, runs, show, export (the run
// store), compare, demo, dispatch, devices, topo, launch, model, schedule, reference: the
// command line's options, parsed here, and the commands they call (commands.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/reference.h"
#include "engine/api/config_api.h"
#include "engine/api/engine_api.h"
#include "engine/api/launch_api.h"
#include "engine/api/model_api.h"
#include "engine/api/run_api.h"
#include "engine/api/schedule_api.h"
#include "engine/api/sweep_api.h"
#include "engine/api/tokenizer_api.h"
#include "engine/api/topology_api.h"

namespace tb::cli {
namespace {

// A number > 0 (or >= 0, `inclusive`), said plainly when it is not: CLI11's PositiveNumber says
// "Value 0 not in range 0.000000 to 1797693...", and the same for "abc".
CLI::Validator number_above_zero(bool inclusive) {
  const std::string want = inclusive ? ">= 0" : "> 0";
  return CLI::Validator(
      [inclusive, want](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0')
          return "expected a number, got '" + text + "'";
        if (!std::isfinite(v)) return "expected a finite number " + want + ", got " + text;
        if (inclusive ? !(v >= 0) : !(v > 0)) return "must be " + want + ", got " + text;
        return {};
      },
      want);
}

// An integer from `lo` to `hi`, said plainly when it is not (CLI11's Range says "Value abc not
// in range 0 to 1024" for a word too).
CLI::Validator integer_in(long long lo, long long hi) {
  const std::string want = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& text) -> std::string {
        long long v = 0;
        const std::size_t plus = !text.empty() && text[0] == '+' ? 1 : 0;  // "+4" is 4
        const auto [end, ec] = std::from_chars(text.data() + plus, text.data() + text.size(), v);
        if (text.size() == plus || ec == std::errc::invalid_argument ||
            end != text.data() + text.size())
          return "expected an integer (" + want + "), got '" + text + "'";
        if (ec == std::errc::result_out_of_range || v < lo || v > hi)
          return "expected an integer from " + want + ", got " + text;
        return {};
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}
const CLI::Validator kPositive = number_above_zero(false);
const CLI::Validator kNonNegative = number_above_zero(true);

// Whether what the command writes on stdout is its result (a table, CSV, JSON, a reference)
// rather than progress beside work kept elsewhere (`run`, `launch`, `sweep` and `demo` record
// into the store).
bool stdout_is_the_result = true;

int cli_main(int argc, char** argv) {
  CLI::App app{"trainbench-cli: train and inspect neural-network runs without a display"};
  app.require_subcommand(1);
  // The global options (--db, --threads, ...) may also follow the command: `runs --db F` as
  // `--db F runs` (an option a command does not know falls through to the program's).
  app.fallthrough();
  int threads = 0;
  std::string gemm = "auto";
  // 0 = the default, as `threads = 0` in a run config.
  app.add_option("--threads", threads,
                 "kernel and BLAS threads (default, or 0: TB_NUM_THREADS or the CPUs this process "
                 "may use)")
      ->check(integer_in(0, 1024));  // the engine's most (tb::core::kMaxNumThreads)
  app.add_option("--gemm-backend", gemm, "auto, onednn, openblas, reference, cublas or cublaslt");
  bool tf32 = false;
  app.add_flag("--tf32", tf32,
               "let float32 products on CUDA devices use TF32 tensor cores (runs: amp.tf32)");
  app.set_version_flag("--version", tb::api::version());

  auto* demo = app.add_subcommand("demo", "run the headless demo and print what it did");
  std::uint64_t seed = 0;
  int steps = 200;
  demo->add_option("--seed", seed, "random seed")->capture_default_str();
  demo->add_option("--steps", steps, "gradient-descent steps")
      ->check(integer_in(1, 1000000))
      ->capture_default_str();

  auto* dispatch = app.add_subcommand("dispatch", "print the dispatcher's kernel table");
  std::string op_filter;
  bool all = false;
  bool matrix = false;
  dispatch->add_option("--op", op_filter, "only ops whose name contains this text");
  dispatch->add_flag("--all", all, "include keys with no kernel (missing or falling through)");
  dispatch->add_flag("--matrix", matrix, "one row per op, one column per dispatch key");
  std::string dispatch_device;
  dispatch->add_option("--device", dispatch_device,
                       "one device's view: which ops run natively and which fall back "
                       "(e.g. openreg, cuda)");

  auto* devices = app.add_subcommand("devices", "list devices and whether they can be used");

  auto* topo = app.add_subcommand(
      "topo", "print the CPU topology and the CPUs each slot gets for a binding mode");
  tb::api::TopologyRequest topo_req;
  std::string binding = "none";
  int slots = 0;
  bool fallback = false;
  topo->add_option("--binding", binding, "none, node, socket, exclusive or core-complex")
      ->capture_default_str();
  topo->add_option("--slots", slots, "number of slots (default: one per GPU given, else 1)")
      ->check(kPositive);
  auto* xml_opt =
      topo->add_option("--topology-xml", topo_req.xml_path, "read an hwloc XML export instead");
  auto* syn_opt = topo->add_option("--synthetic", topo_req.synthetic,
                                   "hwloc synthetic topology, e.g. \"pack:2 numa:2 l3:2 core:4 "
                                   "pu:2\"");
  xml_opt->excludes(syn_opt);
  topo->add_option("--gpu-nodes", topo_req.gpu_nodes,
                   "NUMA node of GPU 0, 1, ... (comma-separated); slots become GPU local ranks")
      ->delimiter(',');
  topo->add_flag("--fallback", fallback, "on a binding error, report the slot unbound and warn");

  auto* launch = app.add_subcommand(
      "launch",
      "run N training processes in parallel, process k bound to CPU slot k (its children inherit "
      "the slot's mask; each run pins its own threads to it)");
  tb::api::LaunchRequest launch_req;
  auto* launch_configs = launch->add_option("configs", launch_req.configs,
                                            "run configs; process k runs config k % count");
  launch
      ->add_option("--nproc", launch_req.nproc,
                   "number of processes (= slots; default: one per config; with --ddp, the "
                   "config's distributed.world_size or 1, or the resumed run's ranks)")
      ->check(integer_in(1, 4096));
  launch
      ->add_option("--binding", launch_req.binding, "none, node, socket, exclusive or core-complex")
      ->capture_default_str();
  launch->add_flag("--fallback", launch_req.fallback,
                   "a slot that cannot be bound runs unbound with a warning");
  launch->add_option("--set", launch_req.overrides, "key.path=value for every process");
  launch->add_flag("--ddp", launch_req.ddp,
                   "one data-parallel run over --nproc ranks started by mpirun (data.batch_size "
                   "is per rank); rank 0 writes the store");
  std::string launch_hosts;
  launch->add_option("--hosts", launch_hosts, "--ddp: hosts (host or host:slots), comma-separated");
  launch->add_option("--hostfile", launch_req.hostfile, "--ddp: an Open MPI hostfile");
  launch
      ->add_option("--resume", launch_req.resume,
                   "--ddp: continue stored run N from its newest checkpoint (same number of ranks)")
      ->check(kPositive);
  launch->callback([&] {
    if (launch_configs->count() == 0 && launch_req.resume == 0)
      throw CLI::RequiredError("configs (or --ddp --resume RUN)");
    if (launch_req.resume > 0 && !launch_req.ddp)
      throw CLI::ValidationError("--resume",
                                 "needs --ddp (without it, resume each run with run --resume)");
    if (!launch_req.ddp && (!launch_hosts.empty() || !launch_req.hostfile.empty()))
      throw CLI::ValidationError(launch_hosts.empty() ? "--hostfile" : "--hosts",
                                 "needs --ddp (without it, the processes run on this machine)");
    // `launch A B C`: one process per config (with --nproc 1, B and C never ran).
    if (!launch_req.ddp && launch->count("--nproc") == 0)
      launch_req.nproc = static_cast<int>(launch_configs->count());
    // `launch --ddp` without --nproc (0): the config's distributed.world_size (else 1 rank, said),
    // or with --resume N as many ranks as the run had.
    if (launch_req.ddp && launch->count("--nproc") == 0) launch_req.nproc = 0;
  });

  auto* model = app.add_subcommand(
      "model",
      "build a model kind from its defaults and settings, or a run config's model; print its "
      "config and parameters");
  std::string model_kind;
  std::vector<std::string> model_settings;
  model
      ->add_option("kind", model_kind,
                   kinds_of("model") +
                       ", or a run config (.toml): its model, and with Muon "
                       "which optimizer takes each parameter")
      ->required();
  model->add_option("--set", model_settings,
                    "field=value over the kind's defaults, e.g. --set d_model=256 --set "
                    "hidden=[512,512]; with a run config key.path=value, as run --set");

  auto* schedule = app.add_subcommand(
      "schedule", "print the learning rate of a scheduler after construction and each step");
  std::string sched_kind;
  std::vector<std::string> sched_settings;
  std::vector<double> sched_lrs;
  int sched_steps = 20;
  bool sched_momentum = false;
  schedule
      ->add_option("kind", sched_kind,
                   kinds_of("scheduler") +
                       "; or a run config (.toml): its [scheduler] on its optimizers' learning "
                       "rates, printed as CSV")
      ->required();
  schedule->add_option("--set", sched_settings,
                       "field=value (PyTorch's argument names), e.g. --set T_max=100 --set "
                       "eta_min=0.01");
  schedule
      ->add_option("--lr", sched_lrs,
                   "base learning rate (default 0.1); repeat for several param groups")
      ->allow_extra_args(false);
  schedule->add_option("--steps", sched_steps, "scheduler steps to print (default 20)")
      ->check(integer_in(0, 10000000));
  schedule->add_flag("--momentum", sched_momentum,
                     "also print the momentum (or beta1 with --set optimizer=adam)");

  std::string db_path;
  app.add_option("--db", db_path,
                 "run store database (default: " + tb::api::default_store_path() + ")")
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            return path.empty() ? "is empty: give a file (or leave --db out for the default)" : "";
          },
          ""))
      ->type_name("PATH");
  auto* run = app.add_subcommand("run", "train a model from a TOML run config into the store");
  std::string run_config;
  std::vector<std::string> run_overrides;
  std::int64_t resume_run = 0;
  auto* run_config_opt = run->add_option(
      "config", run_config,
      "run config (TOML), e.g. resources/configs/*.toml; with --resume, default: the stored "
      "run's config");
  run->add_option("--set", run_overrides, "key.path=value over the config, e.g. optimizer.lr=3e-3");
  std::string resume_checkpoint;
  auto* resume_opt =
      run->add_option("--resume", resume_run, "continue stored run N from its newest checkpoint")
          ->check(kPositive);
  run->add_option("--from-checkpoint", resume_checkpoint,
                  "with --resume: this checkpoint folder instead of the run's newest")
      ->needs(resume_opt)
      ->check(CLI::ExistingDirectory);
  std::string sweep_trial;
  run->add_option("--sweep-trial", sweep_trial,
                  "SWEEP:TRIAL: the new run is trial TRIAL of stored sweep SWEEP (set by "
                  "`trainbench-cli sweep`)")
      ->excludes(resume_opt);
  std::int64_t stop_at = 0;
  run->add_option(
         "--stop-at", stop_at,
         "stop after step N with a checkpoint (status cancelled, exit 0; --resume continues)")
      ->check(kPositive);
  run->callback([&] {
    if (run_config_opt->count() == 0 && resume_opt->count() == 0)
      throw CLI::RequiredError("config (or --resume RUN)");
  });
  auto* runs = app.add_subcommand("runs", "list the runs of the store");
  std::string runs_sweep;
  runs->add_option("--sweep", runs_sweep, "only the runs of sweep NAME");
  auto* show = app.add_subcommand("show", "a run's status, metrics and config");
  std::int64_t show_id = 0;
  show->add_option("run", show_id, "run id")->required();
  auto* compare = app.add_subcommand("compare", "runs side by side: config differences, summary");
  std::vector<std::int64_t> compare_ids;
  compare->add_option("runs", compare_ids, "two or more run ids")->required()->expected(2, -1);
  bool compare_all = false;
  compare->add_flag("--all", compare_all,
                    "list every differing key, also those only some runs' configs have (counted "
                    "per section otherwise)");
  auto* sweep = app.add_subcommand(
      "sweep", "the runs of a config's [sweep] table, N at a time in CPU slots, then its table");
  tb::api::SweepRequest sweep_req;
  bool sweep_dry = false;
  sweep->add_option("config", sweep_req.config_path, "run config with a [sweep] table");
  auto* sweep_set =
      sweep->add_option("--set", sweep_req.overrides, "key.path=value over the run config");
  sweep->add_option("--parallel", sweep_req.parallel, "trials at a time, one per CPU slot")
      ->capture_default_str();
  sweep
      ->add_option("--binding", sweep_req.binding,
                   "none, node, socket, exclusive or core-complex (the slots' CPUs)")
      ->capture_default_str();
  sweep->add_flag("--dry-run", sweep_dry, "print the trials and run nothing");
  sweep->add_option("--resume", sweep_req.resume,
                    "continue sweep NAME of this store: finished runs kept, interrupted ones "
                    "resumed from their checkpoints, the rest started");
  std::string sweep_show;
  sweep->add_option("--show", sweep_show, "print stored sweep NAME's table and run nothing");
  sweep->callback([&] {
    if (!sweep_req.resume.empty() && sweep_set->count() > 0)
      throw CLI::ValidationError(
          "--set",
          "a resumed sweep keeps the trial configs it was planned with; to change "
          "them, start a new sweep (another [sweep] name) with --set");
  });
  auto* sweeps = app.add_subcommand("sweeps", "list the sweeps of the store");
  auto* exp = app.add_subcommand(
      "export", "a run's metrics as CSV or JSON on stdout, or as a TensorBoard event file in DIR");
  std::int64_t export_id = 0;
  std::string export_format = "csv";
  std::string export_dir;
  exp->add_option("run", export_id, "run id")->required();
  exp->add_option("dir", export_dir, "with --format tensorboard: the log directory to write to");
  exp->add_option("--format", export_format, "csv, json or tensorboard")->capture_default_str();
  auto* sample = app.add_subcommand(
      "sample", "text (or token ids) continued by a language-model run's checkpoint");
  tb::api::SampleRequest sample_req;
  std::string sample_ids;
  sample->add_option("run", sample_req.run_id, "run id (qwen-tiny or gpt)")->required();
  auto* sample_prompt =
      sample->add_option("--prompt", sample_req.prompt,
                         "models of text (bytes, SentencePiece): the text to continue (default: a "
                         "line break / a word start)");
  sample
      ->add_option("--prompt-tokens", sample_ids,
                   "models of token files: comma-separated ids to continue (default: "
                   "<|endoftext|> for GPT-2's vocabulary, else id 0)")
      ->excludes(sample_prompt);  // one prompt, as text or as ids
  sample->add_option("--tokens", sample_req.tokens, "new tokens")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--temperature", sample_req.temperature, "0 = always the most likely token")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--top-k", sample_req.top_k, "keep the k most likely tokens (0 = all)")
      ->capture_default_str()
      ->check(kNonNegative);
  sample->add_option("--seed", sample_req.seed, "the draws' seed (sample i: seed + i)")
      ->capture_default_str();
  sample
      ->add_option("--num-samples", sample_req.num_samples,
                   "texts from the same prompt, each followed by a line of dashes when several")
      ->capture_default_str()
      ->check(kPositive);
  sample->add_option("--tokenizer-model", sample_req.tokenizer_model,
                     "the tokenizer model file (SentencePiece .model, GPT-2 vocab.json), when "
                     "the run's data.tokenizer_model has moved");
  sample
      ->add_option("--from-checkpoint", sample_req.checkpoint,
                   "this checkpoint folder instead of the run's newest")
      ->check(CLI::ExistingDirectory);
  auto* weights = app.add_subcommand(
      "weights", "a run's trained weights as a safetensors file PyTorch loads (load_state_dict)");
  std::int64_t weights_id = 0;
  std::string weights_out;
  std::string weights_layout = "trainbench";
  std::string weights_checkpoint;
  bool weights_average = false;
  weights->add_option("run", weights_id, "run id")->required();
  weights->add_flag("--average", weights_average,
                    "the checkpoint's SWA/EMA average (swa.kind) instead of the trained weights");
  weights->add_option("-o,--output", weights_out, "the .safetensors file to write")->required();
  weights
      ->add_option("--layout", weights_layout,
                   "trainbench (the model's own names = torch.nn's) or hf-gpt2 (a gpt run as "
                   "transformers' GPT2LMHeadModel)")
      ->capture_default_str();
  weights
      ->add_option("--checkpoint", weights_checkpoint,
                   "this checkpoint folder instead of the run's newest")
      ->check(CLI::ExistingDirectory);

  auto* tokenizer = app.add_subcommand(
      "tokenizer",
      "train a SentencePiece model; split a text, or make a token file, with it or GPT-2's BPE");
  tokenizer->require_subcommand(1);
  auto* tok_train =
      tokenizer->add_subcommand("train", "train a SentencePiece model on a text file or folder");
  tb::api::TokenizerTrainRequest tok_req;
  tok_train->add_option("text", tok_req.text, "text file or folder (default: Debian's fortunes)");
  tok_train
      ->add_option("-o,--output", tok_req.output,
                   "model prefix: writes PREFIX.model and PREFIX.vocab")
      ->required();
  tok_train->add_option("--vocab-size", tok_req.vocab_size, "pieces")->capture_default_str();
  tok_train->add_option("--model-type", tok_req.model_type, "unigram, bpe, char or word")
      ->capture_default_str();
  tok_train
      ->add_option("--character-coverage", tok_req.character_coverage,
                   "characters the pieces cover (0.9995 for languages with large alphabets)")
      ->capture_default_str();
  tok_train->add_option("--max-lines", tok_req.max_lines, "lines sampled from the text (0 = all)")
      ->capture_default_str();
  auto* tok_encode = tokenizer->add_subcommand(
      "encode",
      "how a SentencePiece model or GPT-2's byte-level BPE splits a text; with --input and -o, "
      "a text file or folder made into a token file for [data] kind = \"tokens\"");
  std::string tok_model;
  std::string tok_text;
  tb::api::TokenFileRequest tok_file;
  tok_encode
      ->add_option("model", tok_model,
                   "a SentencePiece .model file, or GPT-2's vocab.json / encoder.json (with "
                   "merges.txt / vocab.bpe beside it)")
      ->required();
  auto* tok_text_opt = tok_encode->add_option("text", tok_text, "the text to split");
  auto* tok_input = tok_encode->add_option(
      "--input", tok_file.input,
      "a text file or folder to encode into a token file (each file one document; GPT-2: each "
      "after <|endoftext|>)");
  auto* tok_output =
      tok_encode->add_option("-o,--output", tok_file.output, "with --input: the token file");
  tok_encode->add_flag("--raw", tok_file.raw,
                       "with --input: raw uint16 ids (nanoGPT's train.bin) instead of llm.c's "
                       ".bin with its header");
  tok_input->excludes(tok_text_opt);
  tok_input->needs(tok_output);
  tok_output->needs(tok_input);
  tok_encode->callback([&] {
    if (tok_text_opt->count() == 0 && tok_input->count() == 0)
      throw CLI::RequiredError("text (or --input FILE -o OUT.bin)");
  });

  auto* reference = app.add_subcommand(
      "reference",
      "the config reference's tables, generated from the engine's registries (Markdown)");
  std::string reference_check;
  bool reference_update = false;
  auto* reference_check_opt =
      reference->add_option("--check", reference_check,
                            "compare the generated blocks of this file (docs/config-reference.md)");
  reference->add_flag("--update", reference_update, "with --check: rewrite the stale blocks")
      ->needs(reference_check_opt);

  // No command at all (a first try): the commands and options, as git prints its usage.
  if (argc == 1) {
    app.name(argv[0]);
    std::cout << app.help();
    return 1;
  }
  // `--db= runs`: CLI11 reads an empty value after '=' as none and takes the next word as the
  // value (the store became "runs" and the command was lost). An empty value is an error here.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      std::cerr << "error: " << a.substr(0, a.size() - 1)
                << ": empty value (write the value after '=', or leave the option out)\n"
                << "Run with --help for more information.\n";
      return 1;
    }
  }
  // A command's help lists its own options: the program's (--db, --threads, ...) are taken
  // after the command too, and said once at the foot.
  for (CLI::App* sub : app.get_subcommands({}))
    sub->footer(
        "Global options, also after the command: --db PATH, --threads N, --gemm-backend NAME, "
        "--tf32 (trainbench-cli --help says what they do).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A value that is not a number where one is expected: CLI11 says "Could not convert: run =
    // abc"; said as the other commands say it.
    if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
      const std::string what = e.what();
      const std::string tag = "Could not convert: ";
      const auto eq = what.find(" = ");
      if (what.rfind(tag, 0) == 0 && eq != std::string::npos) {
        std::cerr << "error: " << what.substr(tag.size(), eq - tag.size())
                  << ": expected a number, got '" << what.substr(eq + 3) << "'\n"
                  << "Run with --help for more information.\n";
        return e.get_exit_code();
      }
    }
    // A mistyped command: CLI11 says only "A subcommand is required". Name it, and the command
    // it is likely a typo of, or the commands there are.
    if (e.get_exit_code() != 0 && app.get_subcommands().empty()) {
      const auto rest = app.remaining();
      const auto word = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
        return !a.empty() && a.front() != '-';
      });
      if (word != rest.end() && word == rest.begin()) {
        std::vector<std::string> names;
        for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
          names.push_back(sub->get_name());
        const std::string close = tb::api::close_word(*word, names);
        std::cerr << "error: '" << *word << "' is not a trainbench-cli command";
        if (!close.empty()) {
          std::cerr << "; did you mean '" << close << "'?\n";
        } else {
          std::cerr << "; the commands are:";
          for (const auto& n : names)
            std::cerr << " " << n;
          std::cerr << "\n";
        }
        std::cerr << "Run with --help for more information.\n";
        return 1;
      }
    }
    return app.exit(e);
  }

  try {
    // A malformed TB_NUM_THREADS is an error here, before a run is created (it failed the
    // run); commands that only read the store do not need it.
    if (threads > 0) {
      tb::api::set_num_threads(threads);
    } else if (run->parsed() || launch->parsed() || sweep->parsed() || demo->parsed()) {
      (void)tb::api::num_threads();
    }
    const auto choice = tb::api::set_gemm_backend(gemm);
    tb::api::set_allow_tf32(tf32);
    if (tf32) {
      // Runs take it from their config (amp.tf32, stored with the run), so say it there.
      run_overrides.emplace_back("amp.tf32=true");
      launch_req.overrides.emplace_back("amp.tf32=true");
      sweep_req.overrides.emplace_back("amp.tf32=true");
    }
    // The processes launch and sweep start are given this command's threads and GEMM backend.
    std::vector<std::string> child_options;
    if (threads > 0)
      child_options.insert(child_options.end(), {"--threads", std::to_string(threads)});
    if (gemm != "auto") child_options.insert(child_options.end(), {"--gemm-backend", gemm});
    launch_req.program_options = child_options;
    sweep_req.program_options = child_options;
    if (!choice.warning.empty()) std::cerr << "warning: " << choice.warning << "\n";
    if (const auto level = tb::api::cpu_kernel_level(); !level.note.empty())
      std::cerr << "warning: " << level.note << "\n";
    if (const std::string note = tb::api::openblas_note();
        !note.empty() && tb::api::current_gemm_backend() == "openblas")
      std::cerr << "warning: " << note << "\n";
    // (Not for commands that write their result to a file and only say so on stdout: weights,
    // a TensorBoard export, a tokenizer; a sweep's table by --show or --dry-run is its result.)
    const bool sweep_table_only = sweep->parsed() && (sweep_dry || !sweep_show.empty());
    stdout_is_the_result =
        sweep_table_only || !(demo->parsed() || run->parsed() || launch->parsed() ||
                              sweep->parsed() || weights->parsed() || tok_train->parsed() ||
                              (exp->parsed() && export_format == "tensorboard"));
    if (demo->parsed()) return tb::api::run_demo(std::cout, seed, steps);
    if (dispatch->parsed()) {
      if (!dispatch_device.empty()) return cmd_dispatch_device(dispatch_device, op_filter);
      return cmd_dispatch(op_filter, all, matrix);
    }
    if (devices->parsed()) return cmd_devices();
    if (topo->parsed()) return cmd_topo(topo_req, binding, slots, fallback);
    if (launch->parsed()) {
      launch_req.program = this_program("launch");
      launch_req.db_path = db_path;
      launch_req.hosts = split_commas(launch_hosts);
      return launch_req.ddp ? cmd_launch_ddp(launch_req) : cmd_launch(launch_req);
    }
    if (model->parsed()) {
      // A run config (a .toml name, or any file) rather than a kind: the model that config runs.
      std::error_code ec;
      // A kind's name wins over a file of that name in the current folder.
      const auto kinds = tb::api::list_kinds("model");
      const bool is_kind = std::any_of(kinds.begin(), kinds.end(),
                                       [&](const auto& k) { return k.name == model_kind; });
      const bool toml =
          model_kind.size() > 5 && model_kind.compare(model_kind.size() - 5, 5, ".toml") == 0;
      const bool config = !is_kind && (toml || std::filesystem::is_regular_file(model_kind, ec));
      const auto m = config ? tb::api::describe_config_model(model_kind, model_settings)
                            : tb::api::describe_model(model_kind, model_settings);
      std::cout << m.config_toml << "\n" << m.table;
      return 0;
    }
    if (run->parsed()) {
      tb::api::RunRequest req;
      req.config_path = run_config;
      req.overrides = run_overrides;
      req.db_path = db_path;
      if (resume_run > 0) req.resume = resume_run;
      req.resume_checkpoint = resume_checkpoint;
      req.stop_at = stop_at;
      if (!sweep_trial.empty()) {
        const auto colon = sweep_trial.find(':');
        std::int64_t sweep_id = 0;
        std::int64_t trial = -1;
        try {
          std::size_t n1 = 0;
          std::size_t n2 = 0;
          sweep_id = std::stoll(sweep_trial.substr(0, colon), &n1);
          trial = std::stoll(sweep_trial.substr(colon + 1), &n2);
          if (n1 != colon || colon + 1 + n2 != sweep_trial.size()) trial = -1;
        } catch (const std::exception&) {
          trial = -1;
        }
        if (colon == std::string::npos || sweep_id <= 0 || trial < 0) {
          std::cerr << "error: [run] --sweep-trial: expected SWEEP:TRIAL (a sweep id and a trial "
                       "index), got '"
                    << sweep_trial << "'\n";
          return 1;
        }
        req.sweep_trial = std::make_pair(sweep_id, trial);
      }
      return cmd_run(std::move(req));
    }
    if (runs->parsed()) return cmd_runs(db_path, runs_sweep);
    if (show->parsed()) {
      std::cout << tb::api::show_run(db_path, show_id);
      return 0;
    }
    if (compare->parsed()) {
      std::cout << tb::api::compare_runs(db_path, compare_ids, compare_all);
      return 0;
    }
    if (sweep->parsed()) return cmd_sweep(sweep_req, sweep_dry, sweep_show, db_path);
    if (sweeps->parsed()) return cmd_sweeps(db_path);
    if (exp->parsed()) {
      if (export_format == "tensorboard") {
        const std::string file = tb::api::export_tensorboard(db_path, export_id, export_dir);
        std::cout << "wrote " << file << " (tensorboard --logdir " << export_dir << ")\n";
        return 0;
      }
      if (!export_dir.empty()) {
        std::cerr << "error: [export] DIR is for --format tensorboard; csv and json go to stdout\n";
        return 1;
      }
      std::cout << tb::api::export_run(db_path, export_id, export_format);
      return 0;
    }
    if (sample->parsed()) {
      sample_req.db_path = db_path;
      return cmd_sample(sample_req, sample_ids);
    }
    if (weights->parsed()) {
      std::cout << tb::api::export_weights(db_path, weights_id, weights_out, weights_layout,
                                           weights_checkpoint, weights_average);
      return 0;
    }
    if (tok_train->parsed()) {
      std::cout << tb::api::train_tokenizer(tok_req);
      return 0;
    }
    if (tok_encode->parsed()) {
      if (!tok_file.input.empty()) {
        tok_file.model = tok_model;
        std::cout << tb::api::encode_token_file(tok_file);
        return 0;
      }
      std::cout << tb::api::encode_text(tok_model, tok_text);
      return 0;
    }
    if (reference->parsed()) {
      if (reference_check.empty()) {
        print_reference(std::cout);
        return 0;
      }
      const int problems = check_reference(reference_check, reference_update, std::cerr);
      return problems == 0 ? 0 : 1;
    }
    if (schedule->parsed()) {
      if (sched_kind.size() > 5 && sched_kind.compare(sched_kind.size() - 5, 5, ".toml") == 0) {
        if (schedule->count("--lr") || sched_momentum) {
          std::cerr
              << "error: [schedule] --lr and --momentum preview a scheduler kind; a run config "
                 "takes its optimizers' LRs (change them with --set optimizer.lr=...)\n";
          return 1;
        }
        return cmd_schedule_config(sched_kind, sched_settings,
                                   schedule->count("--steps") ? sched_steps : 0);
      }
      return cmd_schedule(sched_kind, sched_settings, sched_lrs, sched_steps, sched_momentum);
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << tb::api::error_text(e) << "\n";
    return 1;
  }
  return 0;
}

// A result that could not be written whole (a full disk, a closed pipe with SIGPIPE ignored)
// is an error: `export 7 > metrics.csv` on a full disk exited 0 with an empty file.
int checked_stdout(int rc) {
  std::cout.flush();
  bool failed = !std::cout.good() || std::ferror(stdout) != 0;
  std::clearerr(stdout);  // what is still buffered is written again: errno says why it fails
  errno = 0;
  failed |= std::fflush(stdout) != 0;
  const int why = errno;
  if (!failed || !stdout_is_the_result) return rc;
  std::cerr << "error: cannot write standard output"
            << (why != 0 ? std::string(" (") + std::strerror(why) + ")" : std::string())
            << ": the output is incomplete\n";
  return rc == 0 ? 1 : rc;
}

}  // namespace
}  // namespace tb::cli

int main(int argc, char** argv) {
  return tb::cli::checked_stdout(tb::cli::cli_main(argc, argv));
}
