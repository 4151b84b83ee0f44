#!/usr/bin/env bash
# Trained weights out and back in (`trainbench-cli weights`, `run.init_from`): a short
# Fashion-MNIST MLP run, its weights exported as safetensors, then a second run that starts
# from them with a zero learning rate evaluates to the first run's stored final accuracy and
# loss, digit for digit. A gpt run exported in Hugging Face's layout comes back the same way.
# Usage: weights_roundtrip.sh CLI REPO_ROOT        (ctest: e2e.weights_roundtrip)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start weights_roundtrip "CLI REPO_ROOT" 2 2 "$@"
cli=$1
repo=$2
e2e_tmpdir
db=$tmp/runs.sqlite
config=$repo/resources/configs/fmnist-mlp-adamw.toml

last_eval() {  # the last eval.accuracy / eval.loss / eval.perplexity values `show` lists
  "$cli" --db "$db" show "$1" | awk '$1 ~ /^eval\.(accuracy|loss|perplexity)$/ {print $1, $2}'
}

"$cli" --db "$db" run "$config" --set run.steps=40 --set eval.batches=4 \
  --set eval.interval=40 >/dev/null 2>&1 || fail "the first run failed"
out=$("$cli" --db "$db" weights 1 -o "$tmp/mlp.safetensors" 2>&1) || fail "weights: $out"
case $out in *"wrote $tmp/mlp.safetensors: 6 tensors, 269322 values of run 1"*) ;;
  *) fail "unexpected weights output: $out" ;; esac
"$cli" --db "$db" run "$config" --set run.steps=1 --set eval.batches=4 --set eval.interval=1 \
  --set optimizer.lr=0 --set optimizer.weight_decay=0 --set run.seed=9 \
  --set run.init_from="$tmp/mlp.safetensors" >/dev/null 2>&1 || fail "the init_from run failed"
a=$(last_eval 1)
b=$(last_eval 2)
[ -n "$a" ] || fail "run 1 shows no eval metrics"
[ "$a" = "$b" ] || fail "evaluations differ: run 1: $a; run 2: $b"
# A checkpoint named by hand must be the run's own: run 1's under run 2's name is refused.
ck=$(ls -d "$tmp"/checkpoints/*/run-1/step-* | tail -1)
out=$("$cli" --db "$db" weights 2 -o "$tmp/x.safetensors" --checkpoint "$ck" 2>&1) &&
  fail "weights of run 2 took run 1's checkpoint: $out"
case $out in *"is a checkpoint of run 1 of this store, not of run 2"*) ;;
  *) fail "unexpected refusal: $out" ;; esac
[ ! -e "$tmp/x.safetensors" ] || fail "a refused export wrote its file"

# A gpt in GPT-2's Hugging Face layout (Conv1D weights, the table cut from its padded rows).
cat >"$tmp/gpt.toml" <<'TOML'
[run]
name = "gpt-bytes"
steps = 10
[model]
kind = "gpt"
vocab = 256
padded_vocab = 320
context_length = 32
n_layers = 1
n_heads = 2
d_model = 16
[data]
kind = "text"
context_length = 32
batch_size = 4
[eval]
interval = 10
batches = 2
TOML
"$cli" --db "$db" run "$tmp/gpt.toml" >/dev/null 2>&1 || fail "the gpt run failed"
out=$("$cli" --db "$db" weights 3 --layout hf-gpt2 -o "$tmp/gpt.safetensors" 2>&1) \
  || fail "weights --layout hf-gpt2: $out"
"$cli" --db "$db" run "$tmp/gpt.toml" --set run.steps=1 --set eval.interval=1 \
  --set optimizer.lr=0 --set optimizer.weight_decay=0 --set run.seed=4 \
  --set run.init_from="$tmp/gpt.safetensors" >/dev/null 2>&1 || fail "the gpt init_from run failed"
a=$(last_eval 3)
b=$(last_eval 4)
[ -n "$a" ] || fail "run 3 shows no eval metrics"
[ "$a" = "$b" ] || fail "gpt evaluations differ: run 3: $a; run 4: $b"
# The run says where its weights came from and how they were read.
"$cli" --db "$db" show 4 | grep -q "info: run.init_from: [0-9]* tensors from $tmp/gpt.safetensors (gpt2 (Conv1D" ||
  fail "run 4 does not say what it loaded: $("$cli" --db "$db" show 4 | grep -a init_from)"
out=$("$cli" --db "$db" weights 1 --layout hf-gpt2 -o "$tmp/x.safetensors" 2>&1) \
  && fail "hf-gpt2 of an mlp run succeeded: $out"
case $out in *"layout hf-gpt2 is for gpt models, not model.kind = 'mlp'"*) ;;
  *) fail "unexpected error: $out" ;; esac
# A file torch.save wrote (a zip archive) named by run.init_from: refused as a config error with
# the conversion, before a run is created.
runs_before=$("$cli" --db "$db" runs | wc -l)
printf 'PK\003\004\000\000\010\000\000\000archive/data.pkl' > "$tmp/ckpt.pt"
out=$("$cli" --db "$db" run "$tmp/gpt.toml" --set run.init_from="$tmp/ckpt.pt" 2>&1) &&
  fail "a run started from a PyTorch .pt file"
case $out in
  *"run.init_from: [safetensors] $tmp/ckpt.pt: is a PyTorch file written by torch.save (a zip archive), not safetensors; convert it once with PyTorch"*) ;;
  *) fail "a .pt in run.init_from said: $out" ;;
esac
[ "$("$cli" --db "$db" runs | wc -l)" = "$runs_before" ] || fail "the refused run was stored"
# A run's SWA/EMA average out (`weights --average`) and back in: evaluates to the run's stored
# eval_ema metrics, digit for digit (an MLP: no BatchNorm statistics to recompute).
"$cli" --db "$db" run "$config" --set run.steps=40 --set eval.batches=4 --set eval.interval=40 \
  --set swa.kind=ema --set swa.ema_decay=0.9 >/dev/null 2>&1 || fail "the ema run failed"
ema=$("$cli" --db "$db" runs | awk 'NR > 1 {print $1}' | sort -n | tail -1)
out=$("$cli" --db "$db" weights "$ema" --average -o "$tmp/avg.safetensors" 2>&1) ||
  fail "weights --average: $out"
case $out in *"of run $ema (its ema average, checkpoint of step 40)"*) ;;
  *) fail "unexpected weights --average output: $out" ;; esac
"$cli" --db "$db" run "$config" --set run.steps=1 --set eval.batches=4 --set eval.interval=1 \
  --set optimizer.lr=0 --set optimizer.weight_decay=0 --set run.seed=9 \
  --set run.init_from="$tmp/avg.safetensors" >/dev/null 2>&1 || fail "the average's run failed"
a=$("$cli" --db "$db" show "$ema" |
  awk '$1 ~ /^eval_ema\.(accuracy|loss)$/ {sub("eval_ema", "eval", $1); print $1, $2}')
b=$(last_eval $((ema + 1)))
[ -n "$a" ] || fail "run $ema shows no eval_ema metrics"
[ "$a" = "$b" ] || fail "the average evaluates otherwise: run $ema: $a; run $((ema + 1)): $b"
out=$("$cli" --db "$db" weights 1 --average -o "$tmp/x.safetensors" 2>&1) &&
  fail "weights --average of a run without an average succeeded: $out"
case $out in *"run 1 keeps no SWA/EMA average (swa.kind = \"none\")"*) ;;
  *) fail "unexpected error: $out" ;; esac
echo "PASS: weights_roundtrip: exported weights evaluate as stored ($(echo $a))"
