"""The ``rlvr`` command: demo, train, sft, eval, verify, data (docs/api.md, "Command line")."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path

from rlvr import __version__
from rlvr.errors import UserError


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.agent and args.vlm:
        raise UserError("rlvr demo: --agent and --vlm are two different demos; choose one")
    if args.vlm:
        from rlvr.demo.vlm import run_vlm_demo

        run_vlm_demo(Path(args.out), seed=args.seed, progress=not args.quiet, overrides=args.overrides)
        return 0
    if args.agent:
        from rlvr.demo.agent import run_agent_demo

        run_agent_demo(Path(args.out), seed=args.seed, progress=not args.quiet, overrides=args.overrides)
        return 0
    from rlvr.demo import run_demo

    run_demo(Path(args.out), seed=args.seed, progress=not args.quiet, overrides=args.overrides)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from rlvr.cluster import launch
    from rlvr.config import load_config

    cfg = load_config(args.config, args.overrides)
    if cfg.model.path is None:
        raise UserError("model.path is not set: give it in the config or as an override, e.g. model.path=path/to/model")
    if cfg.data.train is None:
        raise UserError("data.train is not set: give a JSONL file or a generator spec such as data.train=arithmetic:train")
    run_dir = launch(cfg, resume=args.resume)
    print(f"train: done; run directory {run_dir}")
    return 0


CALIBRATION_METRICS = ("ece", "brier", "auroc")


def _print_summary(summary: dict) -> None:
    for key, value in summary.items():
        if isinstance(value, dict) and "ci95" in value:
            low, high = value["ci95"]
            if key.startswith(("pass@", "maj@", "reward")):
                print(f"{key}: {100 * value['value']:.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f})")
            elif key in CALIBRATION_METRICS:  # values in [0, 1] read to three decimals
                print(f"{key}: {value['value']:.3f} (95% CI {low:.3f}-{high:.3f})")
            else:
                print(f"{key}: {value['value']:.1f} (95% CI {low:.1f}-{high:.1f})")
    print(f"tasks: {summary['n_tasks']}, samples per task: {summary['samples_per_task']}")


def _print_comparison(result: dict) -> None:
    a, b = result["curve"]
    print(f"pass@k of {result['models']['b']} minus {result['models']['a']} on {result['n_tasks']} shared tasks "
          "(paired bootstrap 95% CI):")
    for key, diff in result["difference"].items():
        k = key.split("@")[1]
        low, high = diff["ci95"]
        print(f"  {key}: {100 * result['curve'][a][k]:.1f}% -> {100 * result['curve'][b][k]:.1f}%  "
              f"diff {100 * diff['value']:+.1f} (95% CI {100 * low:+.1f} to {100 * high:+.1f})")


def _parse_ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    ks = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            ks.append(int(part))
        except ValueError:
            raise UserError(f"--k {text}: {part.strip()!r} is not a whole number (expected e.g. --k 1,4,16)") from None
    return ks


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.eval import evaluate_model
    from rlvr.eval.compare import compare_runs

    ks = _parse_ks(args.k)
    common = dict(verifier=args.verifier, samples=args.samples, ks=ks, temperature=args.temperature,
                  max_new_tokens=args.max_new_tokens, seed=args.seed, limit=args.limit, progress=not args.quiet,
                  engine=args.engine, config=args.config, use_run_config=not args.no_run_config,
                  system_prompt=args.system_prompt, prompt_template=args.prompt_template, env=args.env,
                  env_options=_options(args.env_option, "--env-option"), stop=args.stop or None,
                  engine_options=_options(args.engine_option, "--engine-option"),
                  chat_template_kwargs=_options(args.chat_template_kwarg, "--chat-template-kwarg"),
                  answer_after=args.answer_after, self_verify=args.self_verify,
                  self_verify_template=args.self_verify_template, self_verify_mode=args.self_verify_mode)
    if (args.self_verify_template is not None or args.self_verify_mode is not None) and not args.self_verify:
        raise UserError("--self-verify-template and --self-verify-mode need --self-verify")
    if args.baseline and not args.out:
        raise UserError("--baseline needs --out (the per-task files of both models are written beside it)")
    if args.baseline and not Path(args.baseline).is_dir():
        raise UserError(f"--baseline: {args.baseline} is not a directory (expected a Hugging Face model folder)")
    plans = []

    def show(plan) -> None:
        plans.append(plan)
        for line in plan.describe():
            print(line)

    summary = evaluate_model(args.model, args.data, out=args.out, on_plan=show, **common)
    _print_summary(summary)
    _print_self_verify(summary)
    # the baseline is evaluated exactly as the model was: the same tasks, prompts, verifier and engine
    plan = plans[0]
    common.update(verifier=plan.scoring.verifier, config=plan.config, max_new_tokens=plan.max_new_tokens,
                  engine=plan.engine, engine_options=plan.engine_options, stop=list(plan.prompts.stop),
                  chat_template_kwargs=dict(plan.prompts.chat_template_kwargs), answer_after=plan.scoring.answer_after,
                  use_run_config=plan.config is not None)
    args.data = plan.data
    if args.baseline:
        out = Path(args.out)
        base = evaluate_model(args.baseline, args.data, out=str(out.with_name(out.stem + ".baseline.json")), **common)
        print(f"baseline {args.baseline}:")
        _print_summary(base)
        _print_self_verify(base)
        result = compare_runs(base["tasks_file"], summary["tasks_file"], out=out.with_name(out.stem + ".compare.json"),
                              models=(args.baseline, args.model))
        _print_comparison(result)
    return 0


def _print_self_verify(summary: dict) -> None:
    if "self_verify" in summary:
        from rlvr.eval.self_verify import report_lines

        print("\n".join(report_lines(summary["self_verify"])))


def _options(pairs: list[str] | None, flag: str) -> dict | None:
    """KEY=VALUE flags (values read as YAML) as a dict; None when none were given."""
    if not pairs:
        return None
    from rlvr.config import read_yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{flag} {pair}: expected KEY=VALUE (e.g. {flag} max_model_len=2048)")
        out[key.strip()] = read_yaml(value, f"{flag} {pair}")
    return out


def _cmd_compare(args: argparse.Namespace) -> int:
    from rlvr.eval.compare import compare_runs

    ks = _parse_ks(args.k)
    result = compare_runs(args.baseline_tasks, args.model_tasks, ks=ks, seed=args.seed, out=args.out)
    _print_comparison(result)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from rlvr.tasks.jsonl import iter_objects, write_jsonl
    from rlvr.verifiers import ScoreRequest
    from rlvr.verifiers.registry import get_verifier
    from rlvr.verifiers.row_options import score_rows, task_problem

    get_verifier(args.verifier)
    rows = [_verify_row(f"{args.input}:{n}", row) for n, row in iter_objects(args.input)]
    if not rows:
        raise UserError(f"{args.input}: no rows (the file is empty or has only blank lines)")
    requests = [ScoreRequest(r.get("verifier", args.verifier), str(r["response"]), r["reference"],
                             r.get("verifier_options") or {}) for r in rows]
    verdicts = score_rows(requests, [task_problem(r.get("verifier_options"), r["reference"]) for r in rows])
    out_rows = [
        {**row, "score": v.score, "status": v.status.value, "reason": v.reason, "extracted": v.extracted,
         "details": json.loads(json.dumps(v.details, default=repr))}
        for row, v in zip(rows, verdicts)
    ]
    if args.output:
        write_jsonl(args.output, out_rows)
    counts = Counter(v.status.value for v in verdicts)
    total = len(verdicts)
    print(" ".join(f"{status}={n} ({100 * n / total:.1f}%)" for status, n in sorted(counts.items())))
    print(f"mean score: {sum(v.score for v in verdicts) / total:.4f} over {total} rows")
    return 0


def _verify_row(where: str, row: dict) -> dict:
    """A row of `rlvr verify`'s input, or a UserError naming its file:line and field."""
    for name in ("response", "reference"):
        if name not in row:
            raise UserError(f"{where}: field '{name}': missing")
    if row.get("verifier") is not None and not isinstance(row["verifier"], str):
        raise UserError(f"{where}: field 'verifier': expected a verifier name, got {type(row['verifier']).__name__}")
    if row.get("verifier_options") is not None and not isinstance(row["verifier_options"], dict):
        raise UserError(f"{where}: field 'verifier_options': expected an object, got "
                        f"{type(row['verifier_options']).__name__}")
    return row


def _cmd_report(args: argparse.Namespace) -> int:
    from rlvr.eval.run_report import write_run_report

    print(write_run_report(args.run_dir, out=args.out, eval_files=args.eval))
    return 0


def _cmd_sft(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.train.sft_run import run_sft

    print(f"sft: done; run directory {run_sft(load_config(args.config, args.overrides), resume=args.resume)}")
    return 0


def _cmd_data_stats(args: argparse.Namespace) -> int:
    import json

    from rlvr.tasks import load_tasks
    from rlvr.tasks.stats import data_stats, format_stats

    fields = dict(prompt_field=args.prompt_field, reference_field=args.reference_field)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    stats = data_stats(load_tasks(args.source, **fields), eval_tasks=load_tasks(args.eval, **fields) if args.eval else None,
                       default_verifier=args.verifier, tokenizer=tokenizer, self_check=args.self_check)
    print(format_stats(stats))
    if args.json:
        Path(args.json).write_text(json.dumps(stats, indent=1) + "\n")
    return 0


def _cmd_data_audit_rg(args: argparse.Namespace) -> int:
    import json

    from rlvr.tasks.reasoning_gym_audit import audit, format_audit

    rows = audit(args.names.split(",") if args.names else None, size=args.size, seed=args.seed)
    print(format_audit(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def _cmd_recipes(args: argparse.Namespace) -> int:
    from rlvr.algos import recipes

    for name in recipes.names():
        recipe = recipes.get(name)
        print(f"{name}\n  paper:      {recipe.paper}\n  computes:   {recipe.equation}\n  expands to: {recipes.expansion(name)}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from rlvr.serve import serve_from_args

    serve_from_args(args)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from rlvr.models.lora import export_merged

    out = export_merged(args.checkpoint, args.merged)
    print(f"export: merged {args.checkpoint} into {out}")
    return 0


def _cmd_convert_gguf(args: argparse.Namespace) -> int:
    from rlvr.models.gguf import convert_gguf

    out = convert_gguf(args.path, args.out)
    print(f"convert gguf: wrote {out} (a Hugging Face model folder: use it as model.path)")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from rlvr import audit

    if args.target == "judge":
        options = {"base_url": args.endpoint, "model": args.model, "timeout_s": args.timeout, "max_tokens": args.max_tokens}
        report = audit.audit_judge(audit.load_items(args.items), options)
        print(audit.format_judge_report(report))
    else:
        from rlvr.tasks.jsonl import read_rows

        report = audit.audit_verifier(args.name, read_rows(args.data, required=("response", "reference")))
        print(audit.format_verifier_report(report))
    if args.out:
        audit.write_json(args.out, report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning with verifiable rewards for language models.")
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    plugin = argparse.ArgumentParser(add_help=False)
    plugin.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                        help="import this module (a dotted name or a .py file) first, so that what it registers "
                             "(verifiers, estimators, losses, engines) is known; repeatable")
    add_parser = sub.add_parser

    def with_plugins(name: str, **kwargs):
        return add_parser(name, parents=[plugin], **kwargs)

    sub.add_parser = with_plugins  # every command takes --plugin

    demo = sub.add_parser("demo", help="train a tiny model on arithmetic from scratch and show RL improving it")
    demo.add_argument("--out", default="demo_out", help="directory for the models, run and report (default: demo_out)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument("--agent", action="store_true",
                      help="the agent demo: a tiny model learns by RL to use a calculator tool (docs/agents.md)")
    demo.add_argument("--vlm", action="store_true",
                      help="the vision demo: a tiny vision-language model learns by RL to read generated images")
    demo.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                      help="changes to the RL phase's config, e.g. rollout.engine=NAME (the held-out evaluations use it too)")
    demo.set_defaults(func=_cmd_demo)

    tr = sub.add_parser("train", help="RL-train a model as a YAML config says")
    tr.add_argument("config", help="YAML config file")
    tr.add_argument("overrides", nargs="*", help="dotted.key=value overrides, e.g. train.steps=10")
    tr.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out")
    tr.set_defaults(func=_cmd_train)

    sf = sub.add_parser("sft", help="supervised warm start: train on each row's target response (data.completion_field)")
    sf.add_argument("config", help="YAML config file")
    sf.add_argument("overrides", nargs="*", help="dotted.key=value overrides, e.g. train.steps=10")
    sf.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out")
    sf.set_defaults(func=_cmd_sft)

    data = sub.add_parser("data", help="inspect data sources").add_subparsers(dest="data_command", required=True)
    st = data.add_parser("stats", help="rows, fields, lengths, verifier coverage, duplicates and eval overlap")
    st.add_argument("source", help="a data spec: a file, a saved dataset folder, PRESET:FILE or a generator")
    st.add_argument("--eval", help="held-out data spec to check for overlap")
    st.add_argument("--prompt-field", default="prompt")
    st.add_argument("--reference-field", default="reference")
    st.add_argument("--verifier", default="exact", help="verifier of rows that name none (default: exact)")
    st.add_argument("--tokenizer", help="also count lengths in this tokenizer's tokens (a model folder)")
    st.add_argument("--self-check", type=int, default=200,
                    help="rows per verifier whose own reference is scored as a response (0 = none)")
    st.add_argument("--json", help="write the statistics as JSON here")
    st.set_defaults(func=_cmd_data_stats)
    au = data.add_parser("audit-rg", help="probe reasoning-gym's scorers with answers that should score 0")
    au.add_argument("--names", help="comma-separated datasets (default: all)")
    au.add_argument("--size", type=int, default=20, help="entries per dataset")
    au.add_argument("--seed", type=int, default=0)
    au.add_argument("--out", help="write the per-dataset results as JSON here")
    au.set_defaults(func=_cmd_data_audit_rg)

    exp = sub.add_parser("export", help="merge a LoRA checkpoint's adapter into its base model: a plain HF folder")
    exp.add_argument("checkpoint", help="a checkpoint-STEP folder of a run with model.lora")
    exp.add_argument("--merged", required=True, metavar="OUT", help="folder to write the merged model and tokenizer to")
    exp.set_defaults(func=_cmd_export)

    conv = sub.add_parser("convert", help="turn another format into a Hugging Face model folder")
    formats = conv.add_subparsers(dest="format", required=True)
    cg = formats.add_parser("gguf", help="a GGUF file (llama.cpp), dequantized: model, tokenizer, generation config")
    cg.add_argument("path", help="the .gguf file, or a folder holding exactly one")
    cg.add_argument("out", help="the folder to write (must not exist, or be empty)")
    cg.set_defaults(func=_cmd_convert_gguf)
    rec = sub.add_parser("recipes", help="list the algorithm recipes (algo.recipe=NAME) with their papers")
    rec.set_defaults(func=_cmd_recipes)

    ev = sub.add_parser("eval", help="pass@k of a model on JSONL tasks")
    ev.add_argument("--model", required=True, help="Hugging Face model folder (a checkpoint reads its run's config)")
    ev.add_argument("--data", default=None, help="JSONL tasks or a generator spec (default: the run config's data.eval)")
    ev.add_argument("--config", default=None, help="the run config to evaluate as (default: a checkpoint's own "
                    "RUN_DIR/config.yaml): its prompt rendering, environment, stop strings, engine and verifier")
    ev.add_argument("--no-run-config", action="store_true", help="ignore the checkpoint's run config")
    ev.add_argument("--system-prompt", default=None, help="override data.system_prompt")
    ev.add_argument("--prompt-template", default=None, help="override data.prompt_template")
    ev.add_argument("--env", default=None, help="override data.env (a registered environment)")
    ev.add_argument("--env-option", action="append", metavar="KEY=VALUE", help="override data.env_options (repeatable)")
    ev.add_argument("--stop", action="append", metavar="TEXT", help="override rollout.stop (repeatable)")
    ev.add_argument("--chat-template-kwarg", action="append", metavar="KEY=VALUE",
                    help="override rollout.chat_template_kwargs (repeatable; e.g. enable_thinking=false)")
    ev.add_argument("--answer-after", default=None, metavar="TEXT",
                    help="override data.answer_after: score only the text after it (e.g. '</think>')")
    ev.add_argument("--engine-option", action="append", metavar="KEY=VALUE",
                    help="override rollout.engine_options (repeatable; e.g. max_model_len=2048)")
    ev.add_argument("--verifier", default=None,
                    help="default: the model's training run's data.verifier (its config.yaml), else exact")
    ev.add_argument("--samples", type=int, default=1, help="responses per task (n)")
    ev.add_argument("--k", default="1", help="comma-separated k values, each <= --samples")
    ev.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for 1 sample, else 1.0")
    ev.add_argument("--max-new-tokens", type=int, default=None, help="default: the run config's, else 256")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--out", help="write the JSON summary here (and the per-task rows beside it, .tasks.jsonl)")
    ev.add_argument("--limit", type=int, default=0, help="evaluate only the first N tasks (0 = all)")
    ev.add_argument("--baseline", help="also evaluate this model folder on the same tasks and compare (needs --out)")
    ev.add_argument("--engine", default=None, help="rollout engine, by registered name (default: the run config's, else hf)")
    ev.add_argument("--self-verify", action="store_true",
                    help="the model also rates each of its answers: verification accuracy, per class of answer, and "
                         "the share of answers it calls correct (summary key self_verify)")
    ev.add_argument("--self-verify-template", default=None, metavar="TEXT",
                    help="the verification prompt with {prompt} and {response} (default: the run config's "
                         "algo.self_verify_template, else the rating in \\boxed{})")
    ev.add_argument("--self-verify-mode", default=None, choices=["rise", "critique"],
                    help="rise: rate 1 / -0.5 / -1; critique: correct or wrong (default: the run config's, else rise)")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=_cmd_eval)

    cmp_ = sub.add_parser("compare", help="paired comparison of two `rlvr eval` per-task files")
    cmp_.add_argument("baseline_tasks", help="the baseline's .tasks.jsonl")
    cmp_.add_argument("model_tasks", help="the model's .tasks.jsonl")
    cmp_.add_argument("--k", default=None, help="comma-separated k (default: powers of two up to the samples)")
    cmp_.add_argument("--seed", type=int, default=0)
    cmp_.add_argument("--out", help="write the comparison JSON here")
    cmp_.set_defaults(func=_cmd_compare)

    ver = sub.add_parser("verify", help="score JSONL rows that carry 'response' and 'reference'")
    ver.add_argument("--verifier", required=True)
    ver.add_argument("--input", required=True)
    ver.add_argument("--output", help="write one verdict row per input row here")
    ver.set_defaults(func=_cmd_verify)

    rep = sub.add_parser("report", help="one self-contained HTML page of a run's metrics, evals and config")
    rep.add_argument("run_dir", help="run directory holding metrics.jsonl, config.yaml and/or eval/*.json")
    rep.add_argument("--out", help="directory for report.html and its PNGs (default: RUN_DIR/report)")
    rep.add_argument("--eval", action="append", default=[], metavar="FILE",
                     help="also show this `rlvr eval --out` summary or comparison JSON (repeatable)")
    rep.set_defaults(func=_cmd_report)

    srv = sub.add_parser("serve", help="an HTTP reward server (OpenRLHF's POST /get_reward, POST /score, GET /health)")
    which = srv.add_mutually_exclusive_group()
    which.add_argument("--verifier", help="score every row with this verifier (default: exact)")
    which.add_argument("--config", help="YAML config: data.verifier and a composed reward under reward.terms")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, required=True)
    srv.add_argument("--max-rows", type=int, default=4096, help="rows a request may carry")
    srv.add_argument("--max-connections", type=int, default=64, help="open connections; more get 503 at once")
    from rlvr.serve import add_serve_arguments

    add_serve_arguments(srv)
    srv.set_defaults(func=_cmd_serve)

    aud = sub.add_parser("audit", help="false-positive / false-negative estimates of a judge or a verifier")
    targets = aud.add_subparsers(dest="target", required=True)
    aj = targets.add_parser("judge", help="a judge endpoint against master keys, with and without the defences")
    aj.add_argument("--endpoint", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    aj.add_argument("--model", required=True, help="the model name the endpoint serves")
    aj.add_argument("--items", help="JSONL rows with prompt, reference, response (correct) and optional wrong")
    aj.add_argument("--timeout", type=float, default=60.0, help="seconds per judge call, retries included")
    aj.add_argument("--max-tokens", type=int, default=256, help="tokens the judge may write per call")
    aj.add_argument("--out", help="write the full report as JSON here")
    av = targets.add_parser("verifier", help="a verifier against mutations of rows it accepts")
    av.add_argument("name", help="registered verifier name")
    av.add_argument("--data", required=True, help="JSONL rows with response and reference")
    av.add_argument("--out", help="write the full report as JSON here")
    aud.set_defaults(func=_cmd_audit)
    return parser


RELAUNCHED_COMMANDS = ("train", "sft", "demo")  # the commands that train: started again on TCMalloc when installed


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # KEY=VALUE overrides may come after a flag (`rlvr train cfg.yaml --resume train.steps=200`)
    if extra and isinstance(getattr(args, "overrides", None), list) and \
            all("=" in e and not e.startswith("-") for e in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if argv is None and args.command in RELAUNCHED_COMMANDS:
        from rlvr.train.allocator import relaunch_with_tcmalloc

        try:
            relaunch_with_tcmalloc()  # a caching malloc for the trainer's host memory (rlvr.train.allocator)
        except UserError as exc:
            print(f"rlvr {args.command}: error: {exc}", file=sys.stderr)
            return 2
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda message, *_, **__: f"rlvr {args.command}: warning: {message}\n"
    try:
        return _run(args)
    finally:
        warnings.formatwarning = formatwarning


def _run(args: argparse.Namespace) -> int:
    try:
        if getattr(args, "plugin", None):
            from rlvr.plugins import load_plugins

            load_plugins(args.plugin)
        return args.func(args)
    except (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"rlvr {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from rlvr.train.loop import TrainingDiverged

        if isinstance(exc, TrainingDiverged):
            print(f"rlvr {args.command}: error: {exc}", file=sys.stderr)
            return 3
        traceback.print_exc()
        print(f"rlvr {args.command}: internal error ({type(exc).__name__}); the traceback above is a bug in rlvr or "
              f"a plugin: please report it with the command that raised it (rlvr {__version__})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
