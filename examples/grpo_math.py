"""GRPO on arithmetic: the launch post's recipe, on a built-in model or a real chat model.

Shows: K samples per prompt, all requests submitted before any result is awaited; reward 1
for the right answer, advantages normalised within each group; ``forward_backward(...,
loss_fn="ppo")``, ``optim_step`` and ``save_weights_and_get_sampling_client()`` every step
(a fresh sampler each step). The sampling temperature goes to the trainer as the
``temperature`` input, so the ratio starts at exactly 1 (``kl_sample_train`` ~ 0). Prompts are
rendered with the model's own chat template; sampling stops at its end-of-turn token. Held-out
accuracy (questions never trained on) is reported greedy and sampled (the mean reward of
``--eval-samples`` answers per question at the training temperature), with one held-out reply
before and after.

Two tasks (``--task``, picked from the base model by default):
- ``chat`` (any pretrained instruct model, e.g. HuggingFaceTB/SmolLM2-135M-Instruct):
  "Compute 27 + 82. Reply with the result only.", scored on the reply's last number;
  8 prompts x 8 samples at temperature 0.7, lr 2e-4, 12-token answers (``a + b = c`` and its
  end-of-turn token fit; longer replies are cut, which costs them nothing if the answer came
  first), 15 steps, 50 held-out questions, no warm start.
- ``gsm8k`` (the built-in random-init models): one-sentence word problems answered in the
  GSM8K ``#### <n>`` format, after a 60-step SFT warm start (the tiny model knows no
  arithmetic or format at all); 16 prompts x 8 samples, lr 3e-4, 40 steps.

Run:    python examples/grpo_math.py [--base-model HuggingFaceTB/SmolLM2-135M-Instruct]
        [--steps N] [--seed 0] [--task chat|gsm8k] [--smoke] [--run-dir DIR]
        localsession plot DIR        # the curves, as a PNG (needs matplotlib)
Writes: DIR/metrics.jsonl (per step: loss, reward, accuracy, kl_sample_train, tokens/s,
        token counts; held-out accuracy every --eval-every steps), DIR/summary.json.
Expect: SmolLM2-135M-Instruct, 50 held-out questions, 12-token answers: greedy accuracy 0.120
        -> 0.600 after 10 steps (seed 0). With 16-token answers and 40 questions: 0.150 ->
        0.650 after 15 steps (seed 0; 0.100 -> 0.675 for seed 1), and a step took 22.7 s on
        2 idle CPU cores (fp32; that CPU had no bf16). Built-in tiny model: sampled accuracy
        0.178 -> 0.234, greedy flat at 0.234 after 40 steps (GRPO sharpens the policy; it does not
        teach the tiny model new arithmetic: a longer SFT does). docs/examples.md
        has the details.
Real service: change the ``from localsession import`` line to
        ``from sagemaker.train.training_session import`` and pass --base-model.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from localsession import AdamParams, ServiceClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import loop  # noqa: E402
from common.math_tasks import MathProblem, make_split, math_reward  # noqa: E402

from localsession.metrics import MetricsLogger  # noqa: E402

#: Per-task defaults; every one can be overridden on the command line.
DEFAULTS: dict[str, dict[str, Any]] = {
    "chat": dict(
        steps=15,
        sft_steps=0,
        group_size=8,
        prompts=8,
        learning_rate=2e-4,
        temperature=0.7,
        eval_size=50,
        eval_every=5,
        eval_samples=1,
        max_tokens=12,
    ),
    "gsm8k": dict(
        steps=40,
        sft_steps=60,
        group_size=8,
        prompts=16,
        learning_rate=3e-4,
        temperature=0.7,
        eval_size=128,
        eval_every=10,
        eval_samples=4,
        max_tokens=24,
    ),
}


def add_options(parser: Any) -> None:
    parser.add_argument("--task", choices=["auto", "chat", "gsm8k"], default="auto")
    parser.add_argument("--sft-steps", type=int, default=None, help="warm-start steps")
    parser.add_argument("--group-size", type=int, default=None, help="K samples per prompt")
    parser.add_argument("--prompts", type=int, default=None, help="prompts per GRPO step")
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    parser.add_argument("--eval-size", type=int, default=None, help="held-out questions")
    parser.add_argument(
        "--eval-every", type=int, default=None, help="steps between evals (0: none)"
    )
    parser.add_argument(
        "--eval-samples", type=int, default=None, help="sampled answers per question"
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="answer length limit")
    parser.add_argument(
        "--system-prompt",
        default="none",
        help="the system turn's text; 'none': no system turn (the chat template may add its "
        "default one: SmolLM2's does)",
    )


def resolve_options(args: Any) -> Any:
    """Fill every option left unset from the task's defaults (smoke runs: tiny sizes)."""
    if args.task == "auto":
        args.task = "gsm8k" if loop.is_builtin(args.base_model) else "chat"
    for key, value in DEFAULTS[args.task].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.smoke:
        args.sft_steps = min(args.sft_steps, 3)
        args.group_size, args.prompts, args.eval_size = 4, 4, 8
    return args


def prompt_ids(tokenizer: Any, problem: MathProblem, system: str = "none") -> list[int]:
    """The question as a user turn in the model's chat template, after a system turn holding
    ``system`` (``"none"``: no system turn, so the template inserts its default, if any)."""
    turns = [] if system == "none" else [{"role": "system", "content": system}]
    turns.append({"role": "user", "content": problem.question})
    return loop.chat_prompt(tokenizer, turns)


def evaluate(
    svc: loop.Service, sampler: Any, tok: Any, problems: list[MathProblem], args: Any
) -> dict[str, Any]:
    """Held-out accuracy, sampled (the mean reward of ``--eval-samples`` answers per question
    at the training temperature: the policy GRPO optimises) and greedy, plus the first
    question's greedy reply. Every request is in flight before any result is awaited."""
    sampled = svc.params(args.max_tokens, temperature=args.temperature, seed=12345, stop=None)
    greedy = svc.params(args.max_tokens, temperature=0.0, seed=0, stop=None)
    prompts = [prompt_ids(tok, p, args.system_prompt) for p in problems]
    s_futures = [sampler.sample(p, args.eval_samples, sampled) for p in prompts]
    g_futures = [sampler.sample(p, 1, greedy) for p in prompts]
    g_texts = [loop.decode(tok, f.result().sequences[0]) for f in g_futures]
    s_scores = [
        math_reward(loop.decode(tok, seq), p)
        for f, p in zip(s_futures, problems, strict=True)
        for seq in f.result().sequences
    ]
    g_scores = [math_reward(t, p) for t, p in zip(g_texts, problems, strict=True)]
    return {
        "sampled": sum(s_scores) / max(1, len(s_scores)),
        "greedy": sum(g_scores) / max(1, len(g_scores)),
        "reply": g_texts[0],
        "replies": g_texts,
        "correct": [score > 0 for score in g_scores],
    }


def accuracy_line(when: str, result: dict[str, Any]) -> str:
    """One line: held-out greedy accuracy (and how many), sampled accuracy beside it."""
    right, total = sum(result["correct"]), len(result["correct"])
    return (
        f"held-out accuracy {when} training: {result['greedy']:.3f} greedy ({right}/{total}), "
        f"{result['sampled']:.3f} sampled"
    )


def first_learned(
    problems: list[MathProblem], before: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any] | None:
    """The first held-out question (greedy, by position) that training taught: wrong before,
    right after; else the first one right after (it knew it already); None if it answers
    none. With its replies before and after, and whether the one before was right."""
    right_after = [i for i in range(len(problems)) if after["correct"][i]]
    learned = [i for i in right_after if not before["correct"][i]]
    picks = learned or right_after
    if not picks:
        return None
    index = picks[0]
    return {
        "question": problems[index].question,
        "expected": problems[index].answer,
        "reply_after": after["replies"][index],
        "reply_before": before["replies"][index],
        "correct_before": before["correct"][index],
    }


def warm_start(
    tc: Any, tok: Any, train: list[MathProblem], rng: random.Random, log: Any, args: Any
) -> None:
    """SFT on the reference solutions at a constant learning rate of 3e-3."""
    if args.sft_steps == 0:
        return
    system = args.system_prompt
    for step in loop.progress(range(args.sft_steps), desc="SFT warm start", quiet=args.quiet):
        batch = [
            loop.sft_datum(prompt_ids(tok, p, system), loop.completion_ids(tok, p.solution))
            for p in rng.sample(train, 32)
        ]
        started = time.perf_counter()
        fb = tc.forward_backward(batch, "cross_entropy")
        tc.optim_step(AdamParams(learning_rate=3e-3))
        loss = loop.loss_per_token(fb.result().metrics["loss"], batch)
        seconds = time.perf_counter() - started
        log.log(step, phase="sft", loss=loss, train_tokens_per_s=loop.batch_tokens(batch) / seconds)


def grpo_step(
    svc: loop.Service,
    tc: Any,
    sampler: Any,
    tok: Any,
    problems: Sequence[MathProblem],
    seed: int,
    args: Any,
) -> dict[str, float]:
    """One GRPO step; returns its metrics (``sample_seconds`` / ``train_seconds``: wall
    time of sampling and of ``forward_backward`` + ``optim_step``; ``cpu_seconds``: this
    process's CPU time over the step, all threads, a load-independent measure)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    k, temperature = args.group_size, args.temperature
    prompts = [prompt_ids(tok, p, args.system_prompt) for p in problems]
    params = svc.params(args.max_tokens, temperature=temperature, seed=seed, stop=None)
    futures = [sampler.sample(p, k, params) for p in prompts]  # all in flight, then wait
    datums, rewards, sampled = [], [], 0
    for problem, prompt, future in zip(problems, prompts, futures, strict=True):
        seqs = future.result().sequences
        group = [math_reward(loop.decode(tok, s), problem) for s in seqs]
        rewards += group
        sampled += sum(len(s.tokens) for s in seqs)
        if max(group) == min(group):
            continue  # no signal: every advantage would be 0
        for seq, adv in zip(seqs, loop.group_advantages(group), strict=True):
            assert seq.logprobs is not None
            datums.append(
                loop.rl_datum(
                    prompt, seq.tokens, seq.logprobs, [adv] * len(seq.tokens), temperature
                )
            )
    sample_seconds = time.perf_counter() - started
    metrics: dict[str, float] = {
        "reward": sum(rewards) / len(rewards),
        "accuracy": sum(r == 1.0 for r in rewards) / len(rewards),
        "groups_used": len(datums) / k,
        "sampled_tokens": sampled,
        "prefill_tokens": sum(map(len, prompts)),
        "sample_tokens_per_s": sampled / sample_seconds,
        "sample_seconds": sample_seconds,
    }
    if datums:
        train_started = time.perf_counter()
        fb = tc.forward_backward(datums, "ppo")
        opt = tc.optim_step(AdamParams(learning_rate=args.learning_rate))
        out = fb.result()
        metrics["loss"] = loop.loss_per_token(out.metrics["loss"], datums)
        metrics["kl_sample_train"] = out.metrics.get("actor/ppo_kl", 0.0)
        metrics["clipfrac"] = out.metrics.get("actor/pg_clipfrac", 0.0)
        metrics["grad_norm"] = opt.result().metrics.get("grad_norm", 0.0)
        metrics["train_tokens"] = loop.batch_tokens(datums)
        metrics["train_seconds"] = time.perf_counter() - train_started
        metrics["train_tokens_per_s"] = metrics["train_tokens"] / metrics["train_seconds"]
    metrics["cpu_seconds"] = time.process_time() - cpu_started
    return metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = loop.parse_args(__doc__, steps=None, smoke_steps=2, argv=argv, extra=add_options)
    args = resolve_options(args)
    run_dir = loop.run_dir_for(args, "grpo_math")
    train, held_out = make_split(args.seed, 2000, args.eval_size, style=args.task)
    rng = random.Random(args.seed)
    svc = loop.open_service(ServiceClient)
    started = time.perf_counter()
    with (
        MetricsLogger(run_dir, config=vars(args)) as log,
        svc.client.create_lora_training_client(args.base_model, rank=16, alpha=32) as tc,
    ):
        tok = tc.get_tokenizer()
        warm_start(tc, tok, train, rng, log, args)
        sampler = tc.save_weights_and_get_sampling_client()
        eval_started = time.perf_counter()
        before = evaluate(svc, sampler, tok, held_out, args)
        eval_seconds = time.perf_counter() - eval_started
        log.log(
            0, phase="grpo", eval_accuracy=before["sampled"], eval_greedy_accuracy=before["greedy"]
        )
        print(accuracy_line("before", before), flush=True)
        grpo_started = time.perf_counter()
        bar = loop.progress(range(1, args.steps + 1), desc="GRPO", quiet=args.quiet)
        for step in bar:
            problems = rng.sample(train, args.prompts)
            metrics = grpo_step(svc, tc, sampler, tok, problems, args.seed * 100_003 + step, args)
            sampler = tc.save_weights_and_get_sampling_client()
            if args.eval_every and step % args.eval_every == 0 and step != args.steps:
                mid = evaluate(svc, sampler, tok, held_out, args)
                metrics["eval_accuracy"], metrics["eval_greedy_accuracy"] = (
                    mid["sampled"],
                    mid["greedy"],
                )
            metrics["seconds"] = time.perf_counter() - grpo_started
            log.log(step, phase="grpo", **metrics)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(reward=f"{metrics['reward']:.2f}")
        grpo_seconds = time.perf_counter() - grpo_started
        eval_started = time.perf_counter()
        after = evaluate(svc, sampler, tok, held_out, args)
        eval_seconds += time.perf_counter() - eval_started
        log.log(
            args.steps,
            phase="grpo",
            eval_accuracy=after["sampled"],
            eval_greedy_accuracy=after["greedy"],
        )
    summary = {
        "example": "grpo_math",
        "base_model": args.base_model,
        "task": args.task,
        "held_out_accuracy_before": before["sampled"],
        "held_out_accuracy_after": after["sampled"],
        "held_out_greedy_accuracy_before": before["greedy"],
        "held_out_greedy_accuracy_after": after["greedy"],
        "held_out_questions": args.eval_size,
        "sample": {
            "question": held_out[0].question,
            "expected": held_out[0].answer,
            "reply_before": before["reply"],
            "reply_after": after["reply"],
        },
        "sft_steps": args.sft_steps,
        "grpo_steps": args.steps,
        "seconds": round(time.perf_counter() - started, 1),
        "grpo_seconds": round(grpo_seconds, 1),
        "eval_seconds": round(eval_seconds, 1),
        "run_dir": str(run_dir),
    }
    learned = first_learned(held_out, before, after)
    summary["first_correct_after"] = learned
    loop.write_summary(run_dir, summary)
    print(accuracy_line("after", after))
    if learned is None:
        print("the trained model answers no held-out question correctly")
    else:
        was = "right" if learned["correct_before"] else "wrong"
        what = "it answered right already" if learned["correct_before"] else "it learned"
        print(
            f"first held-out question {what}: "
            f"{learned['question']!r} -> {learned['reply_after']!r} "
            f"(expected {learned['expected']}; before training: {learned['reply_before']!r}, {was})"
        )
    print(
        f"grpo_math ({args.task}, {args.base_model}): held-out greedy accuracy "
        f"{before['greedy']:.3f} -> {after['greedy']:.3f} (sampled {before['sampled']:.3f} -> "
        f"{after['sampled']:.3f}) after {args.steps} GRPO steps ({args.sft_steps} SFT "
        f"warm-start steps), {summary['seconds']}s; metrics in {run_dir}"
    )
    return summary


if __name__ == "__main__":
    loop.run_main(main)
