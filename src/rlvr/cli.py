"""The ``rlvr`` command: demo, train, eval, verify (CONTRACTS.md C4)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from rlvr import __version__


def _cmd_demo(args: argparse.Namespace) -> int:
    from rlvr.demo import run_demo

    run_demo(Path(args.out), seed=args.seed, progress=not args.quiet)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.train import train

    cfg = load_config(args.config, args.overrides)
    if cfg.model.path is None:
        raise ValueError("model.path is not set: give it in the config or as an override, e.g. model.path=path/to/model")
    if cfg.data.train is None:
        raise ValueError("data.train is not set: give a JSONL file or a generator spec such as data.train=arithmetic:train")
    run_dir = train(cfg, resume=args.resume)
    print(f"train: done; run directory {run_dir}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.eval.report import evaluate_model

    ks = [int(k) for k in args.k.split(",") if k.strip()]
    summary = evaluate_model(
        args.model, args.data, verifier=args.verifier, samples=args.samples, ks=ks,
        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed, out=args.out,
    )
    for key, value in summary.items():
        if isinstance(value, dict):
            low, high = value["ci95"]
            print(f"{key}: {100 * value['value']:.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f})")
    print(f"tasks: {summary['n_tasks']}, samples per task: {summary['samples_per_task']}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from rlvr.tasks.jsonl import read_rows, write_jsonl
    from rlvr.verifiers import ScoreRequest, score_batch
    from rlvr.verifiers.registry import get_verifier

    get_verifier(args.verifier)
    rows = read_rows(args.input, required=("response", "reference"))
    verdicts = score_batch([ScoreRequest(r.get("verifier", args.verifier), str(r["response"]), r["reference"], r.get("verifier_options") or {}) for r in rows])
    out_rows = [
        {**row, "score": v.score, "status": v.status.value, "reason": v.reason, "extracted": v.extracted}
        for row, v in zip(rows, verdicts)
    ]
    if args.output:
        write_jsonl(args.output, out_rows)
    counts = Counter(v.status.value for v in verdicts)
    total = len(verdicts)
    print(" ".join(f"{status}={n} ({100 * n / total:.1f}%)" for status, n in sorted(counts.items())))
    print(f"mean score: {sum(v.score for v in verdicts) / total:.4f} over {total} rows")
    return 0


def _cmd_recipes(args: argparse.Namespace) -> int:
    from rlvr.algos import recipes

    for name in recipes.names():
        recipe = recipes.get(name)
        print(f"{name}\n  paper:      {recipe.paper}\n  computes:   {recipe.equation}\n  expands to: {recipes.expansion(name)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning with verifiable rewards for language models.")
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train a tiny model on arithmetic from scratch and show RL improving it")
    demo.add_argument("--out", default="demo_out", help="directory for the models, run and report (default: demo_out)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=_cmd_demo)

    tr = sub.add_parser("train", help="RL-train a model as a YAML config says")
    tr.add_argument("config", help="YAML config file")
    tr.add_argument("overrides", nargs="*", help="dotted.key=value overrides, e.g. train.steps=10")
    tr.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in train.out")
    tr.set_defaults(func=_cmd_train)

    rec = sub.add_parser("recipes", help="list the algorithm recipes (algo.recipe=NAME) with their papers")
    rec.set_defaults(func=_cmd_recipes)

    ev = sub.add_parser("eval", help="pass@k of a model on JSONL tasks")
    ev.add_argument("--model", required=True, help="Hugging Face model folder")
    ev.add_argument("--data", required=True, help="JSONL tasks or a generator spec")
    ev.add_argument("--verifier", default="exact")
    ev.add_argument("--samples", type=int, default=1, help="responses per task (n)")
    ev.add_argument("--k", default="1", help="comma-separated k values, each <= --samples")
    ev.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for 1 sample, else 1.0")
    ev.add_argument("--max-new-tokens", type=int, default=256)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--out", help="write the JSON summary here")
    ev.set_defaults(func=_cmd_eval)

    ver = sub.add_parser("verify", help="score JSONL rows that carry 'response' and 'reference'")
    ver.add_argument("--verifier", required=True)
    ver.add_argument("--input", required=True)
    ver.add_argument("--output", help="write one verdict row per input row here")
    ver.set_defaults(func=_cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"rlvr {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
